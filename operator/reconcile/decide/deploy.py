"""Deploy: the first deploy, and creating the next driver for any operation (its Deploying phase).

Pure. Called by the other operation modules of ``reconcile.decide`` when their
operation reaches Deploying; ``deploying`` continues that phase on later passes.
"""

from __future__ import annotations

import json

from streamjob_operator.api.spec import DesiredState, StreamJobSpec
from streamjob_operator.api.status import LifecycleState, Operation

from .. import names
from ..model import CreateDriver, EnsureSupportObjects, PodPhase
from . import upgrade
from .context import POLL_SECONDS, STATE_OF_KIND, OpKind, Pass, Phase, RestoreMode, hash_text, spec_hash, spec_json


def first_deploy(p: Pass) -> None:
    if p.spec.state is DesiredState.suspended:
        p.update(state=LifecycleState.suspended, last_reconciled_spec=spec_json(p.spec))
        p.emit("Normal", "Suspended", "Created suspended: no driver deployed until spec.state is running")
        return
    initial = p.spec.initial_savepoint_path
    op = Operation(
        kind=OpKind.deploy.value,
        phase=Phase.deploying.value,
        target_spec_hash=spec_hash(p.spec),
        savepoint_path=initial,
        restore_mode=(RestoreMode.savepoint if initial else RestoreMode.stateless).value,
        started_at=p.t(),
        message=f"first deploy, restoring savepoint {initial}" if initial else "first deploy",
    )
    p.emit("Normal", "Deploying", f"Deploying the job{f' from savepoint {initial}' if initial else ''}")
    enter_deploying(p, op, spec_json(p.spec))


def enter_deploying(p: Pass, op: Operation, deploy_spec_json: str) -> None:
    """Records the next driver (epoch, name, checkpoint, restore source) and creates it."""
    if p.obs.drivers:  # never two drivers: stop what is there first
        p.update(operation=op.model_copy(update={"phase": Phase.stopping.value}))
        p.again(0)
        return
    deploy_spec = StreamJobSpec.model_validate(json.loads(deploy_spec_json))
    epoch = p.st.driver_epoch + 1
    mode = RestoreMode(op.restore_mode or RestoreMode.last_state.value)
    base = deploy_spec.checkpoint.location
    restored: str | None
    if mode is RestoreMode.savepoint and op.savepoint_path:
        checkpoint, restored = names.checkpoint_location(base, p.obs.name, p.obs.uid, epoch), op.savepoint_path
        how = f"restoring savepoint {restored} into {checkpoint}"
    elif mode is RestoreMode.last_state and p.st.checkpoint_location:
        checkpoint, restored = p.st.checkpoint_location, p.st.restored_from
        batch = p.st.last_checkpoint.batch_id if p.st.last_checkpoint else None
        how = f"resuming checkpoint {checkpoint}{f' after batch {batch}' if batch is not None else ''}"
    else:
        checkpoint, restored = names.checkpoint_location(base, p.obs.name, p.obs.uid, epoch), None
        how = f"with fresh state at {checkpoint}"
    pod = names.driver_pod(p.obs.name, epoch)
    # one deadline for the whole way from pod creation to a running driver (and, for upgrades, to the first batch)
    deadline = p.t(deploy_spec.rollback.readiness_timeout_seconds)
    p.update(
        driver_epoch=epoch,
        driver_pod=pod,
        checkpoint_location=checkpoint,
        restored_from=restored,
        deployed_at=p.t(),
        last_reconciled_spec=deploy_spec_json,
        operation=op.model_copy(update={"phase": Phase.deploying.value, "deadline": deadline}),
        state=STATE_OF_KIND[OpKind(op.kind)],
        ready=False,
        job=None,
    )
    p.actions.append(EnsureSupportObjects(deploy_spec.service_account_name))
    p.actions.append(create_driver(p))
    p.emit("Normal", "DriverCreated", f"Created driver pod {pod}, {how}")
    p.again(POLL_SECONDS)


def create_driver(p: Pass) -> CreateDriver:
    st = p.st
    assert st.driver_pod and st.last_reconciled_spec and st.checkpoint_location
    return CreateDriver(
        pod=st.driver_pod,
        epoch=st.driver_epoch,
        spec_json=st.last_reconciled_spec,
        checkpoint_location=st.checkpoint_location,
        restore_from=st.restored_from,
        spec_hash=hash_text(st.last_reconciled_spec),
    )


def deploying(p: Pass) -> None:
    from .flow import delete_strays

    op = p.op()
    cur = p.current
    if delete_strays(p):
        return
    if op.deadline is None:  # recorded by an operator that set no deadline here
        p.op_update(deadline=p.t(p.spec.rollback.readiness_timeout_seconds))
        op = p.op()
    if cur is None:  # recorded but not (yet) created, e.g. the operator died in between, or the API refused it
        if p.past(op.deadline):
            not_started(p, f"driver pod {p.st.driver_pod} could not be created by {op.deadline}"
                        f"{f' ({p.st.reconcile_error.message})' if p.st.reconcile_error else ''}")
            return
        spec = StreamJobSpec.model_validate(json.loads(p.st.last_reconciled_spec or "{}"))
        p.actions.append(EnsureSupportObjects(spec.service_account_name))
        p.actions.append(create_driver(p))
        p.again(POLL_SECONDS)
        return
    if cur.terminated:
        upgrade.exited_while_starting(p, cur)
        return
    if cur.phase is not PodPhase.running or cur.deleting:
        if p.past(op.deadline):
            why = f": {cur.message}" if cur.message else f" (phase {cur.phase.value})"
            not_started(p, f"driver pod {cur.name} did not start by {op.deadline}{why}")
            return
        p.again(POLL_SECONDS)
        return
    kind = OpKind(op.kind)
    if kind is OpKind.upgrade and upgrade.can_roll_back(p):
        p.op_update(phase=Phase.awaiting_ready.value)  # the deadline set at creation covers the first batch too
        p.again(POLL_SECONDS)
        return
    p.update(operation=None, state=LifecycleState.running, next_restart_at=None)
    if kind is OpKind.rollback:
        p.emit("Normal", "RolledBack", f"Driver {cur.name} runs the last stable spec again")
    elif kind is OpKind.upgrade:
        p.emit("Normal", "UpgradeCompleted", f"Driver {cur.name} runs the new spec")
        p.update(blocked_change=None)
    else:
        p.emit("Normal", "DriverStarted", f"Driver {cur.name} is running")
    p.again(POLL_SECONDS)


def not_started(p: Pass, why: str) -> None:
    """The deploy deadline passed before the driver ran: roll an upgrade back, otherwise count a failure."""
    from . import restart

    limit = f"spec.rollback.readinessTimeoutSeconds={p.spec.rollback.readiness_timeout_seconds}s"
    if p.op().kind == OpKind.upgrade.value and upgrade.can_roll_back(p):
        upgrade.start_rollback(p, f"the upgraded driver did not start within {limit}: {why}")
        return
    restart.count_failure(p, p.st.driver_pod or "driver", f"{why} (deadline {limit})", reason="DriverNotStarted")
