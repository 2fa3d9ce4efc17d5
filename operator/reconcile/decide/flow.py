"""The shape of a pass: which operation module acts, given the lifecycle state and the operation in progress.

Pure. Called by ``reconcile.decide.decide``. Without an operation, the
lifecycle state picks the module (running, suspended, stopped); with one,
its phase does (Savepointing, Stopping, Waiting, Deploying, AwaitingReady).
"""

from __future__ import annotations

from datetime import timedelta

from streamjob_operator.api.spec import DesiredState
from streamjob_operator.api.status import LifecycleState

from ..model import DeleteDriver, DriverPod
from ..policy import parse_time
from . import conditions, deletion, deploy, restart, savepoint, suspend, upgrade
from .context import FORCE_DELETE_GRACE_SECONDS, STUCK_TERMINATING_SECONDS, OpKind, Pass, Phase, spec_json


def run(p: Pass) -> None:
    conditions.record_progress(p)
    if p.obs.deleting:
        deletion.deletion(p)
    elif p.st.operation is not None:
        continue_operation(p)
    else:
        steady(p)
    savepoint.retention(p)
    conditions.conditions(p)
    p.update(observed_generation=p.obs.generation)


# --- without an operation ----------------------------------------------------------------------
def steady(p: Pass) -> None:
    st = p.st
    if st.state is None or st.last_reconciled_spec is None:
        deploy.first_deploy(p)
        return
    drop_outdated_block(p)
    if delete_strays(p):
        return
    if st.state is LifecycleState.suspended:
        suspend.suspended(p)
    elif st.state in (LifecycleState.failed, LifecycleState.finished):
        upgrade.stopped_job(p)
    else:
        running(p)


def drop_outdated_block(p: Pass) -> None:
    """A blocked change whose spec is no longer the spec (reverted, or edited again) stops blocking and stops
    making the job Degraded: the spec as it is now is handled as any other (and blocked again if it must be)."""
    block = p.st.blocked_change
    if block is None or p.blocked():
        return
    p.update(blocked_change=None)
    p.emit("Normal", "BlockedChangeCleared",
           f"The spec is no longer the one blocked by {block.reason}: that block no longer applies")


def delete_strays(p: Pass) -> bool:
    """Drivers that are not the recorded one are deleted first: never two drivers for a job."""
    strays = [pod for pod in p.obs.drivers if pod.name != p.st.driver_pod]
    for pod in strays:
        if not pod.deleting:
            p.actions.append(DeleteDriver(pod.name))
            p.emit("Warning", "StrayDriverDeleted", f"Deleted driver pod {pod.name}: the current driver is {p.st.driver_pod}")
    if strays:
        p.again(1)
    return bool(strays)


def running(p: Pass) -> None:
    cur = p.current
    if cur is None:
        p.emit("Warning", "DriverLost", f"Driver pod {p.st.driver_pod} is gone without a request; restarting from the latest checkpoint")
        restart.start_restart(p, "driver pod disappeared")
        return
    if cur.terminated:
        restart.driver_exited(p, cur)
        return
    if cur.deleting:
        force_stuck(p, [cur])
        p.again(1)
        return
    if p.job_ready():
        if p.st.restart_count and stable_since_deploy(p):
            p.update(restart_count=0)
            p.emit("Normal", "RestartCountReset",
                   f"Driver {cur.name} has been ready for spec.restartPolicy.resetAfterSeconds="
                   f"{p.spec.restart_policy.reset_after_seconds}s: restartCount reset")
        if p.st.last_stable_spec != p.st.last_reconciled_spec:
            p.update(last_stable_spec=p.st.last_reconciled_spec)
    if p.spec.state is DesiredState.suspended and not p.blocked():
        suspend.start_suspend(p)
    elif upgrade.start_change(p):
        pass
    elif p.spec.savepoint_nonce != p.st.last_savepoint_nonce:
        savepoint.start_savepoint(p, "manual")
    elif savepoint.periodic_due(p):
        savepoint.start_savepoint(p, "periodic")


def stable_since_deploy(p: Pass) -> bool:
    """Ready now, and deployed at least resetAfterSeconds ago (the restart policy's stable period)."""
    deployed = parse_time(p.st.deployed_at)
    return deployed is None or p.now >= deployed + timedelta(seconds=p.spec.restart_policy.reset_after_seconds)


def force_stuck(p: Pass, pods: list[DriverPod]) -> set[str]:
    """Pods still Terminating well past their grace period (a lost node): deleted with grace 0, with an event."""
    stuck = [pod for pod in pods if pod.deleting and pod.deletion_deadline is not None
             and p.now >= pod.deletion_deadline + timedelta(seconds=STUCK_TERMINATING_SECONDS)]
    for pod in stuck:
        p.actions.append(DeleteDriver(pod.name, grace_seconds=0))
        p.emit("Warning", "DriverForceDeleted",
               f"Driver pod {pod.name} was still terminating {STUCK_TERMINATING_SECONDS}s after its grace period "
               "(its node is probably lost): deleted it with grace 0")
    return {pod.name for pod in stuck}


# --- with an operation ---------------------------------------------------------------------------
def continue_operation(p: Pass) -> None:
    phase = p.op().phase
    if phase == Phase.savepointing.value:
        savepoint.savepointing(p)
    elif phase == Phase.stopping.value:
        stopping(p)
    elif phase == Phase.waiting.value:
        restart.waiting(p)
    elif phase == Phase.deploying.value:
        deploy.deploying(p)
    elif phase == Phase.awaiting_ready.value:
        upgrade.awaiting_ready(p)
    else:  # an unknown phase (a newer operator wrote it?): start over from what is observed
        p.emit("Warning", "OperationAbandoned", f"Unknown operation phase {phase!r}; re-observing")
        p.update(operation=None, state=LifecycleState.running)
        p.again(0)


def stopping(p: Pass) -> None:
    """Every operation's Stopping phase: delete the drivers, then hand over to the operation's next step."""
    op = p.op()
    pods = p.obs.drivers
    if pods:
        deadline = parse_time(op.deadline)
        force = op.kind == OpKind.delete.value and deadline is not None and p.now >= deadline
        if force and deadline is not None and p.now >= deadline + timedelta(seconds=FORCE_DELETE_GRACE_SECONDS):
            p.emit("Warning", "DeletionForced", f"Driver pods {[pod.name for pod in pods]} still present after the deadline; "
                   "finishing deletion, garbage collection removes them")
            deletion.finish_deletion(p)
            return
        forced = set() if force else force_stuck(p, list(pods))
        for pod in pods:
            if (not pod.deleting or force) and pod.name not in forced:
                p.actions.append(DeleteDriver(pod.name, grace_seconds=0 if force else None))
        p.again(1)
        return
    kind = op.kind
    if kind == OpKind.suspend.value:
        suspend.stopped(p)
    elif kind == OpKind.delete.value:
        deletion.finish_deletion(p)
    elif kind == OpKind.restart.value:
        restart.stopped(p)
    elif kind == OpKind.rollback.value:
        assert p.st.last_stable_spec is not None
        deploy.enter_deploying(p, op, p.st.last_stable_spec)
    else:  # the spec that was checked when the operation started; a later edit rolls out after it
        deploy.enter_deploying(p, op, op.target_spec or spec_json(p.spec))
