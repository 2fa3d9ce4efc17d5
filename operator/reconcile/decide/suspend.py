"""Suspend and resume: stop with a savepoint (or the latest checkpoint), and deploy again on resume.

Pure. Called by ``steady`` when spec.state and the lifecycle state disagree;
``flow`` hands ``SUSPEND`` and ``RESUME`` to the shared phases.
"""

from __future__ import annotations

import json

from streamjob_operator.api.spec import DesiredState, UpgradeMode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Operation, Phase

from . import deploy, restart, rollout
from .context import Pass, Steps, spec_hash, spec_json
from .repartition import refuse_repartition


def start_suspend(p: Pass) -> None:
    if p.spec.savepoint is not None and p.spec.upgrade_mode is not UpgradeMode.stateless:
        op = Operation(kind=OpKind.suspend, phase=Phase.savepointing, savepoint_path=p.new_savepoint_path("suspend"),
                       trigger="suspend", restore_mode=UpgradeMode.savepoint, started_at=p.t(),
                       deadline=p.t(p.spec.savepoint.timeout_seconds), message="suspending with a savepoint")
        p.update(last_savepoint_attempt_at=p.t())
        p.emit("Normal", "Suspending", f"Suspending: taking savepoint {op.savepoint_path}, then stopping the driver")
    else:
        op = Operation(kind=OpKind.suspend, phase=Phase.stopping, restore_mode=UpgradeMode.last_state,
                       started_at=p.t(), message="suspending (no savepoint location: resume from the latest checkpoint)")
        p.emit("Normal", "Suspending", "Suspending: stopping the driver; resume continues from the latest checkpoint")
    p.update(operation=op, state=LifecycleState.suspending)
    p.again(0)


def suspend_stopped(p: Pass) -> None:
    """A Failed or Finished job asked to suspend: nothing runs, so no savepoint is possible."""
    p.update(
        operation=Operation(kind=OpKind.suspend, phase=Phase.stopping, restore_mode=UpgradeMode.last_state,
                            started_at=p.t(), message="suspending a stopped job (no savepoint possible)"),
        state=LifecycleState.suspending,
    )
    p.again(0)


def stopped(p: Pass) -> None:
    """The driver is gone: the job is suspended."""
    op = p.op()
    p.update(operation=None, state=LifecycleState.suspended, driver_pod=None, ready=False)
    where = f" with savepoint {op.savepoint_path}" if op.savepoint_path else ""
    p.emit("Normal", "Suspended", f"Suspended{where}; set spec.state to running to resume")


def suspended(p: Pass) -> None:
    if p.spec.state is DesiredState.running:
        if refuse_repartition(p):
            return
        resume(p)
        return
    if p.spec.savepoint_nonce != p.st.last_savepoint_nonce:
        p.update(last_savepoint_nonce=p.spec.savepoint_nonce)
        where = f"; its last savepoint is {p.st.last_savepoint.path}" if p.st.last_savepoint else ""
        p.emit("Warning", "SavepointSkipped", f"No savepoint taken: the job is suspended{where}")


def resume(p: Pass) -> None:
    last = p.st.last_savepoint
    if p.st.driver_epoch == 0:  # created suspended: this is the first deploy
        p.update(state=None, last_reconciled_spec=None)
        deploy.first_deploy(p)
        return
    redeploy = p.st.last_reconciled_spec is not None and json.loads(p.st.last_reconciled_spec).get(
        "savepointRedeployNonce", 0) != p.spec.savepoint_redeploy_nonce
    if redeploy and p.spec.initial_savepoint_path:
        mode, path = UpgradeMode.savepoint, p.spec.initial_savepoint_path
    elif p.spec.upgrade_mode is UpgradeMode.stateless:
        mode, path = UpgradeMode.stateless, None
    elif p.spec.upgrade_mode is UpgradeMode.savepoint and last is not None and last.trigger == "suspend":
        mode, path = UpgradeMode.savepoint, last.path
    else:
        mode, path = UpgradeMode.last_state, None
    op = Operation(
        kind=OpKind.resume,
        phase=Phase.deploying,
        target_spec_hash=spec_hash(p.spec),
        savepoint_path=path,
        restore_mode=mode,
        started_at=p.t(),
        message=f"resuming from savepoint {path}" if path else f"resuming ({mode.value})",
    )
    p.emit("Normal", "Resuming", f"Resuming the job {f'from savepoint {path}' if path else f'with upgradeMode {mode.value}'}")
    rollout.enter_deploying(p, op, spec_json(p.spec))


SUSPEND = Steps(
    after_stopping=stopped,
    started=rollout.started,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
)

RESUME = Steps(
    after_stopping=rollout.deploy_target,
    started=rollout.started,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
)
