"""The Deploying phase every deploying operation passes through: record the next driver, create it, see it run.

Pure. ``enter_deploying`` is called by the operation modules (deploy, restart,
upgrade, suspend) when their operation reaches Deploying; ``flow`` calls
``deploying`` on later passes with the operation's ``Steps``, which say what a
started, exited or never-started driver means for that operation.
"""

from __future__ import annotations

import json

from streamjob_operator.api.spec import StreamJobSpec, UpgradeMode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import CheckpointInfo, OpKind, Operation, Phase

from .. import names
from ..model import CreateDriver, DriverPod, EnsureSupportObjects, PodPhase
from . import lineage
from .context import POLL_SECONDS, Pass, Steps, clip, hash_text, spec_json
from .strays import delete_strays


def enter_deploying(p: Pass, op: Operation, deploy_spec_json: str) -> None:
    """Records the next driver (epoch, name, checkpoint, restore source) and creates it."""
    if p.obs.drivers:  # never two drivers: stop what is there first
        p.update(operation=op.model_copy(update={"phase": Phase.stopping}))
        p.again(0)
        return
    behind = lineage.restore_behind(p, op)
    if behind is not None:
        refuse_restore(p, op, deploy_spec_json, *behind)
        return
    deploy_spec = StreamJobSpec.model_validate(json.loads(deploy_spec_json))
    epoch = p.st.driver_epoch + 1
    mode = op.restore_mode or UpgradeMode.last_state
    base = deploy_spec.checkpoint.location
    restored: str | None
    expect: int | None = None
    if mode is UpgradeMode.savepoint and op.savepoint_path:
        checkpoint, restored = names.checkpoint_location(base, p.obs.name, p.obs.uid, epoch), op.savepoint_path
        how = f"restoring savepoint {restored} into {checkpoint}"
        saved = lineage.savepoint_batch(p, restored)
        if saved is not None:  # the new checkpoint starts at the savepoint's batch: the job's lineage now ends there
            p.update(last_checkpoint=CheckpointInfo(batch_id=saved, time=p.t()))
    elif mode is UpgradeMode.last_state and p.st.checkpoint_location:
        checkpoint, restored = p.st.checkpoint_location, p.st.restored_from
        batch = p.st.last_checkpoint.batch_id if p.st.last_checkpoint else None
        expect = expected_batch(batch, p.spec.checkpoint.accept_behind_batch)  # read live, as an acknowledgement
        how = f"resuming checkpoint {checkpoint}{f' after batch {batch}' if batch is not None else ''}"
        if batch is not None and expect is None:
            how += f" (spec.checkpoint.acceptBehindBatch={batch}: accepted behind it)"
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
        operation=op.model_copy(update={"phase": Phase.deploying, "deadline": deadline, "expect_committed": expect}),
        state=op.kind.lifecycle_state,
        ready=False,
        job=None,
    )
    p.actions.append(EnsureSupportObjects(deploy_spec.service_account_name))
    p.actions.append(create_driver(p))
    p.emit("Normal", "DriverCreated", f"Created driver pod {pod}, {how}")
    p.again(POLL_SECONDS)


def refuse_restore(p: Pass, op: Operation, deploy_spec_json: str, saved: int, committed: int) -> None:
    """The restore would go behind the job: not done. The job's own spec resumes its checkpoint instead,
    which holds the committed batch; with no checkpoint to resume, the job is held (Failed) for the user."""
    assert op.savepoint_path is not None
    message = lineage.refusal(op.savepoint_path, saved, committed, f"{op.kind} not done")
    lineage.refuse(p, "SavepointBehindJob", message, op.target_spec_hash or hash_text(deploy_spec_json))
    if not (p.st.checkpoint_location and p.st.last_reconciled_spec):
        p.update(state=LifecycleState.failed, operation=None, next_restart_at=None)
        p.failure = ("SavepointBehindJob", message)
        return
    keep = Operation(kind=OpKind.restart, phase=Phase.deploying, restore_mode=UpgradeMode.last_state, started_at=p.t(),
                     message=clip(f"resuming checkpoint {p.st.checkpoint_location} at batch {committed} instead of "
                                  f"restoring savepoint {op.savepoint_path} (batch {saved})"))
    enter_deploying(p, keep, p.st.last_reconciled_spec)


def expected_batch(last_committed: int | None, accepted: int | None) -> int | None:
    """The batch a resumed checkpoint must hold: the last one the job committed, unless the user accepted
    resuming behind exactly that one (spec.checkpoint.acceptBehindBatch); None when nothing was committed."""
    if last_committed is None or accepted == last_committed:
        return None
    return last_committed


def deploy_target(p: Pass) -> None:
    """After Stopping, for the operations that roll out a spec: the spec checked when the operation started
    (a later edit rolls out after it)."""
    op = p.op()
    enter_deploying(p, op, op.target_spec or spec_json(p.spec))


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
        expect_committed=st.operation.expect_committed if st.operation else None,
        avoid_node=st.operation.avoid_node if st.operation else None,
    )


def deploying(p: Pass, steps: Steps) -> None:
    op = p.op()
    cur = p.current
    if delete_strays(p):
        return
    if op.deadline is None:  # recorded by an operator that set no deadline here
        p.op_update(deadline=p.t(p.spec.rollback.readiness_timeout_seconds))
        op = p.op()
    if cur is None:  # recorded but not (yet) created, e.g. the operator died in between, or the API refused it
        if p.past(op.deadline):
            steps.not_started(p, f"driver pod {p.st.driver_pod} could not be created by {op.deadline}"
                              f"{f' ({p.st.reconcile_error.message})' if p.st.reconcile_error else ''}")
            return
        spec = StreamJobSpec.model_validate(json.loads(p.st.last_reconciled_spec or "{}"))
        p.actions.append(EnsureSupportObjects(spec.service_account_name))
        p.actions.append(create_driver(p))
        p.again(POLL_SECONDS)
        return
    if cur.terminated:
        steps.exited_while_starting(p, cur)
        return
    if cur.phase is not PodPhase.running or cur.deleting:
        if p.past(op.deadline):
            why = f": {cur.message}" if cur.message else f" (phase {cur.phase.value})"
            steps.not_started(p, f"driver pod {cur.name} did not start by {op.deadline}{why}")
            return
        p.again(POLL_SECONDS)
        return
    steps.started(p, cur)


def now_running(p: Pass) -> None:
    """The operation is over: the job runs (no restart pending)."""
    p.update(operation=None, state=LifecycleState.running, next_restart_at=None)


def started(p: Pass, pod: DriverPod) -> None:
    """Most operations are done once their driver runs."""
    now_running(p)
    p.emit("Normal", "DriverStarted", f"Driver {pod.name} is running")
    p.again(POLL_SECONDS)
