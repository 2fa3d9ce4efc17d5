"""Upgrade and rollback: rolling out a changed spec, waiting for it to be ready, rolling back.

With spec.standby.enabled the new driver starts before the old one stops (``standby``).

Pure. Called by ``steady`` for a running or stopped job whose spec differs
from ``status.lastReconciledSpec``; ``flow`` hands ``UPGRADE`` and ``ROLLBACK``
to the shared phases, and calls ``awaiting_ready`` for an upgraded driver
that has not completed a batch yet.
"""

from __future__ import annotations

import json

from streamjob_operator.api.spec import UpgradeMode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Operation, Phase

from ..changes import ChangeKind, changed_fields, classify
from ..model import DriverPod
from . import lineage, restart, rollout, standby
from .conditions import find
from .context import POLL_SECONDS, UPGRADE_QUEUED, Pass, Steps, clip, hash_text, spec_dict, spec_hash, spec_json
from .repartition import refuse_repartition


def start_change(p: Pass) -> bool:
    """Starts rolling out a changed spec of a running job; True when the pass has done its work."""
    assert p.st.last_reconciled_spec is not None
    old = json.loads(p.st.last_reconciled_spec)
    new = spec_dict(p.spec)
    kind = classify(old, new)
    if kind is ChangeKind.ignore:
        if old != new:
            p.update(last_reconciled_spec=spec_json(p.spec))
        return False
    if p.blocked():
        return False
    if refuse_repartition(p):
        return True
    if kind is ChangeKind.restart_only:
        p.emit("Normal", "Restarting", "restartNonce changed: restarting the driver from the latest checkpoint")
        p.update(last_reconciled_spec=spec_json(p.spec))
        restart.start_restart(p, "restartNonce changed")
        return True
    fields = ", ".join(f for f, k in changed_fields(old, new).items() if k is not ChangeKind.ignore)
    if not p.obs.upgrade_slot:
        queue(p, fields)
        return False
    if kind is ChangeKind.savepoint_restore:
        start_savepoint_restore(p)
        return True
    mode = p.spec.upgrade_mode
    if mode is UpgradeMode.savepoint and p.spec.savepoint is None:
        mode = UpgradeMode.last_state
    op = Operation(kind=OpKind.upgrade, phase=Phase.stopping, target_spec_hash=spec_hash(p.spec),
                   target_spec=spec_json(p.spec), restore_mode=mode, started_at=p.t(), message=clip(f"changed: {fields}"))
    if mode is UpgradeMode.savepoint and standby.wanted(p):
        p.update(blocked_change=None, last_savepoint_nonce=p.spec.savepoint_nonce, last_restart_nonce=p.spec.restart_nonce)
        p.emit("Normal", "Upgrading", clip(f"Rolling out the changed spec ({fields}) through a warm standby (spec.standby)"))
        standby.start(p, op)
        return True
    if mode is UpgradeMode.savepoint:
        assert p.spec.savepoint is not None
        op = op.model_copy(update={
            "phase": Phase.savepointing,
            "savepoint_path": p.new_savepoint_path("upgrade"),
            "trigger": "upgrade",
            "deadline": p.t(p.spec.savepoint.timeout_seconds),
        })
        p.update(last_savepoint_attempt_at=p.t())
    p.update(
        operation=op,
        state=LifecycleState.upgrading,
        blocked_change=None,
        last_savepoint_nonce=p.spec.savepoint_nonce,
        last_restart_nonce=p.spec.restart_nonce,
    )
    p.emit("Normal", "Upgrading", clip(f"Rolling out the changed spec ({fields}) with upgradeMode {mode.value}"))
    p.again(0)
    return True


def queue(p: Pass, fields: str) -> None:
    """No upgrade slot is free (the operator's --max-concurrent-upgrades): the job keeps running its current spec,
    Progressing and Reconciling say why the change waits, an event says it once; a later pass starts the upgrade
    when another job's upgrade has ended. Nothing is recorded in status but the conditions: the queue is the
    operator's, and a restarted operator rebuilds it from the jobs' operations."""
    p.queued = clip(f"The changed spec ({fields}) waits for an upgrade slot: the operator runs at most "
                    "--max-concurrent-upgrades upgrades at once")
    prior = find(p, "Progressing")
    if prior is None or prior.reason != UPGRADE_QUEUED:
        p.emit("Normal", UPGRADE_QUEUED, p.queued)
    p.again(POLL_SECONDS)


def stopped_job(p: Pass) -> None:
    """Failed or Finished (and not asked to suspend): wait for a spec change or a restartNonce."""
    assert p.st.last_reconciled_spec is not None
    kind = classify(json.loads(p.st.last_reconciled_spec), spec_dict(p.spec))
    if kind is ChangeKind.ignore:
        return
    p.update(restart_count=0, failure_times=[], last_error=None)
    if kind is ChangeKind.restart_only:
        p.emit("Normal", "Restarting", f"restartNonce changed: restarting the {p.st.state if p.st.state else ''} job from the latest checkpoint")
        p.update(last_reconciled_spec=spec_json(p.spec))
        restart.start_restart(p, "restartNonce changed")
        return
    if kind is ChangeKind.savepoint_restore:
        start_savepoint_restore(p)
        return
    if refuse_repartition(p):
        return
    mode = UpgradeMode.stateless if p.spec.upgrade_mode is UpgradeMode.stateless else UpgradeMode.last_state
    fields = ", ".join(changed_fields(json.loads(p.st.last_reconciled_spec), spec_dict(p.spec)))
    p.update(
        operation=Operation(kind=OpKind.upgrade, phase=Phase.stopping, target_spec_hash=spec_hash(p.spec),
                            target_spec=spec_json(p.spec), restore_mode=mode, started_at=p.t(),
                            message=clip(f"redeploying a stopped job: {fields}")),
        state=LifecycleState.upgrading,
        last_restart_nonce=p.spec.restart_nonce,
    )
    p.emit("Normal", "Upgrading", clip(f"Redeploying the stopped job with the changed spec ({fields}), {mode.value}"))
    p.again(0)


def start_savepoint_restore(p: Pass) -> None:
    """savepointRedeployNonce changed: stop without a savepoint, deploy the spec restoring initialSavepointPath."""
    path = p.spec.initial_savepoint_path
    assert path is not None  # the CRD requires initialSavepointPath with savepointRedeployNonce
    p.update(
        operation=Operation(kind=OpKind.upgrade, phase=Phase.stopping, target_spec_hash=spec_hash(p.spec),
                            target_spec=spec_json(p.spec), savepoint_path=path, restore_mode=UpgradeMode.savepoint,
                            started_at=p.t(), message=clip(f"redeploying from savepoint {path} (savepointRedeployNonce)")),
        state=LifecycleState.upgrading,
        blocked_change=None,
        restart_count=0,
        failure_times=[],
        last_error=None,
        last_savepoint_nonce=p.spec.savepoint_nonce,
        last_restart_nonce=p.spec.restart_nonce,
    )
    p.emit("Normal", "RedeployingFromSavepoint",
           f"savepointRedeployNonce changed: redeploying from savepoint {path}; the current state is discarded")
    p.again(0)


def can_roll_back(p: Pass) -> bool:
    st = p.st
    return bool(p.spec.rollback.enabled and st.last_stable_spec and st.last_stable_spec != st.last_reconciled_spec)


def exited_while_starting(p: Pass, pod: DriverPod) -> None:
    detail = f": {pod.message}" if pod.message else ""
    if p.op().kind is OpKind.upgrade and can_roll_back(p):
        start_rollback(p, f"the upgraded driver {pod.name} exited before becoming ready (exit {pod.exit_code}){detail}")
        return
    restart.exited_while_starting(p, pod)


def not_started(p: Pass, why: str) -> None:
    """The deploy deadline passed before the upgraded driver ran: roll back, or count a failure."""
    limit = f"spec.rollback.readinessTimeoutSeconds={p.spec.rollback.readiness_timeout_seconds}s"
    if can_roll_back(p):
        start_rollback(p, f"the upgraded driver did not start within {limit}: {why}")
        return
    restart.not_started(p, why)


def started(p: Pass, pod: DriverPod) -> None:
    """The upgraded driver runs: with a stable spec to return to, wait for its first batch (AwaitingReady)."""
    if can_roll_back(p):
        p.op_update(phase=Phase.awaiting_ready)  # the deadline set at creation covers the first batch too
        p.again(POLL_SECONDS)
        return
    rollout.now_running(p)
    p.emit("Normal", "UpgradeCompleted", f"Driver {pod.name} runs the new spec")
    p.update(blocked_change=None)
    p.again(POLL_SECONDS)


def awaiting_ready(p: Pass) -> None:
    op = p.op()
    cur = p.current
    if p.job_ready():
        assert cur is not None
        p.update(operation=None, state=LifecycleState.running, last_stable_spec=p.st.last_reconciled_spec, blocked_change=None)
        p.emit("Normal", "UpgradeCompleted", f"Driver {cur.name} runs the new spec and completed a batch; it is the new stable spec")
        return
    if cur is not None and cur.terminated:
        exited_while_starting(p, cur)
        return
    if cur is None or p.past(op.deadline):
        start_rollback(
            p,
            f"the upgraded job did not become ready within spec.rollback.readinessTimeoutSeconds="
            f"{p.spec.rollback.readiness_timeout_seconds}s",
        )
        return
    p.again(POLL_SECONDS)


def start_rollback(p: Pass, why: str) -> None:
    op = p.op()
    past = lineage.behind(p, op.savepoint_path if op.restore_mode is UpgradeMode.savepoint else None)
    if past is not None:
        restart_instead(p, why, *past)
        return
    p.block("RolledBack", f"Rolled back: {why}. The change is retried on the next spec change or nonce.", op.target_spec_hash)
    path = op.savepoint_path if op.restore_mode is UpgradeMode.savepoint else None
    assert p.st.last_stable_spec is not None
    p.update(
        operation=Operation(kind=OpKind.rollback, phase=Phase.stopping, target_spec_hash=hash_text(p.st.last_stable_spec),
                            savepoint_path=path, restore_mode=op.restore_mode, started_at=p.t(), message=clip(why)),
        state=LifecycleState.rolling_back,
        last_error=clip(why),
    )
    p.emit("Warning", "RollingBack", f"{why}; rolling back to the last stable spec{f' from savepoint {path}' if path else ''}")
    p.again(0)


def restart_instead(p: Pass, why: str, saved: int, committed: int) -> None:
    """The upgraded driver committed past the upgrade savepoint: rolling back to it would go back.
    No rollback: the upgraded spec restarts from its latest checkpoint, a failure the restart policy counts."""
    op = p.op()
    assert op.savepoint_path is not None and p.st.last_stable_spec is not None
    what = (f"{why}; not rolled back: it committed batch {committed}, past the upgrade savepoint "
            f"{op.savepoint_path} (batch {saved}), so it restarts from its latest checkpoint. "
            f"To return to the last stable spec, apply it again")
    p.block("RollbackRefused", what, hash_text(p.st.last_stable_spec))
    pod = p.current.name if p.current is not None else (p.st.driver_pod or "driver")
    restart.count_failure(p, pod, clip(what, 600), reason="RollbackRefused", why=clip(why, 200))


def after_stopping(p: Pass) -> None:
    """The old driver is gone: a warm standby takes over, or the target spec is deployed."""
    if p.op().standby_pod is not None:
        standby.release(p)
        return
    rollout.deploy_target(p)


def rollback_stopped(p: Pass) -> None:
    """The upgraded driver is gone: deploy the last stable spec again."""
    assert p.st.last_stable_spec is not None
    rollout.enter_deploying(p, p.op(), p.st.last_stable_spec)


def rolled_back(p: Pass, pod: DriverPod) -> None:
    rollout.now_running(p)
    p.emit("Normal", "RolledBack", f"Driver {pod.name} runs the last stable spec again")
    p.again(POLL_SECONDS)


UPGRADE = Steps(
    after_stopping=after_stopping,
    started=started,
    exited_while_starting=exited_while_starting,
    not_started=not_started,
)

ROLLBACK = Steps(
    after_stopping=rollback_stopped,
    started=rolled_back,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
)
