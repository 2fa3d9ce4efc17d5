"""A job without an operation: what it needs now, and which operation starts.

Pure. Called by ``flow`` when ``status.operation`` is empty and the job is not
being deleted. The lifecycle state picks the branch (never deployed, suspended,
Failed or Finished, running); for a running job the order says what wins:
a lost or exited driver, then suspend, a spec change, a manual savepoint, a
periodic one.
"""

from __future__ import annotations

from datetime import timedelta

from streamjob_operator.api.spec import DesiredState
from streamjob_contract.lifecycle import LifecycleState

from ..policy import parse_time
from . import deploy, restart, savepoint, suspend, upgrade
from .context import Pass
from .strays import delete_strays, force_stuck


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
        if p.spec.state is DesiredState.suspended:
            suspend.suspend_stopped(p)
        else:
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
    if restart.driver_unreachable(p, cur):
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
