"""Savepoints: manual and periodic ones, the Savepointing phase of every operation, and retention.

Pure. Called by ``steady`` (nonce, schedule) and ``flow`` (the Savepointing
phase on each pass, retention at the end of every pass).
"""

from __future__ import annotations

from streamjob_contract.runtime_status import SavepointState
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import MAX_SAVEPOINT_HISTORY, OpKind, Operation, Phase, SavepointInfo

from ..model import DeleteSavepoint, TriggerSavepoint
from ..policy import parse_duration, parse_time
from . import lineage, restart, rollout
from .context import POLL_SECONDS, Pass, Steps, clip, hash_text


def start_savepoint(p: Pass, trigger: str) -> None:
    p.update(last_savepoint_nonce=p.spec.savepoint_nonce)
    if p.spec.savepoint is None:
        p.emit("Warning", "SavepointSkipped", "No savepoint taken: spec.savepoint.location is not set")
        return
    path = p.new_savepoint_path(trigger)
    p.update(
        operation=Operation(kind=OpKind.savepoint, phase=Phase.savepointing, savepoint_path=path, trigger=trigger,
                            started_at=p.t(), deadline=p.t(p.spec.savepoint.timeout_seconds), message=f"{trigger} savepoint"),
        last_savepoint_attempt_at=p.t(),
    )
    p.emit("Normal", "Savepointing", f"Taking a {trigger} savepoint to {path} while the job keeps running")
    p.again(0)


def periodic_due(p: Pass) -> bool:
    sp = p.spec.savepoint
    if sp is None or not sp.periodic_interval or not p.job_ready():
        return False
    last = p.st.last_savepoint
    bases = [parse_time(x) for x in (last.time if last else None, p.st.last_savepoint_attempt_at, p.st.deployed_at)]
    known = [b for b in bases if b is not None]
    return not known or p.now >= max(known) + parse_duration(sp.periodic_interval)


def savepointing(p: Pass) -> None:
    op = p.op()
    cur = p.current
    manifest = p.obs.manifest if p.obs.manifest and p.obs.manifest.path == op.savepoint_path else None
    progress = p.obs.savepoint
    if manifest is not None or (progress is not None and progress.state is SavepointState.COMPLETED):
        completed(p, manifest.batch_id if manifest else (progress.batch_id if progress else None),
                  manifest.size_bytes if manifest else None)
        return
    if cur is not None and cur.terminated and cur.savepoint_path == op.savepoint_path:
        completed(p, cur.savepoint_batch)  # the runtime's termination message says it wrote the manifest
        return
    why: str | None = None
    if progress is not None and progress.state is SavepointState.FAILED:
        why = progress.error or "the driver reported the savepoint failed"
    elif p.past(op.deadline):
        why = f"no complete savepoint (manifest) at {op.savepoint_path} by the deadline {op.deadline}"
    elif cur is None or cur.terminated or cur.deleting:
        code = f" (exit {cur.exit_code})" if cur is not None and cur.exit_code is not None else ""
        why = f"the driver stopped before the savepoint completed{code}"
    if why is not None:
        failed(p, why)
        return
    if op.trigger_id is None or p.obs.savepoint_unknown:
        if p.running_driver() is not None and p.reachable():
            assert cur is not None and op.savepoint_path is not None
            # the request is named here and recorded in this pass's one status write, before it is asked: a pass
            # that dies after asking finds it by that name; asking again with it starts nothing new
            trigger_id = op.trigger_id or request_id(op.savepoint_path)
            p.op_update(trigger_id=trigger_id)
            p.actions.append(TriggerSavepoint(cur.name, op.savepoint_path, stop=op.kind is not OpKind.savepoint,
                                              trigger_id=trigger_id))
    p.again(POLL_SECONDS)


def request_id(savepoint_path: str) -> str:
    """The savepoint request's name: from its path, which is new for every operation."""
    return f"sp-{hash_text(savepoint_path)[:16]}"


def completed(p: Pass, batch_id: int | None, size_bytes: int | None = None) -> None:
    op = p.op()
    assert op.savepoint_path is not None
    info = SavepointInfo(path=op.savepoint_path, batch_id=batch_id, time=p.t(), trigger=op.trigger or op.kind, size_bytes=size_bytes)
    history = [info] + [h for h in p.st.savepoint_history if h.path != info.path]
    p.update(last_savepoint=info, savepoint_history=history[:MAX_SAVEPOINT_HISTORY])
    message = f"Savepoint {info.path} completed at batch {batch_id} ({info.trigger})"
    p.savepoint_result = ("SavepointCompleted", message)
    p.emit("Normal", "SavepointCompleted", message)
    if op.kind is OpKind.savepoint:
        p.update(operation=None)
        return
    past = lineage.behind(p, info.path) if op.kind in (OpKind.upgrade, OpKind.suspend) else None
    if past is not None and p.running_driver() is not None:
        # the driver went on committing after the manifest (a runtime that restarted its query):
        # restoring this savepoint would go back, so the change is not done and the job keeps running
        message = lineage.refusal(info.path, *past, f"{op.kind} not done, the running job was kept")
        lineage.refuse(p, "SavepointBehindJob", message, op.target_spec_hash)
        p.update(operation=None, state=LifecycleState.running)
        p.again(0)
    else:  # recorded before anything is deleted: the next pass stops the driver
        p.op_update(phase=Phase.stopping, trigger_id=None)
        p.again(0)


def failed(p: Pass, why: str) -> None:
    op = p.op()
    p.savepoint_result = ("SavepointFailed", clip(f"Savepoint {op.savepoint_path} failed: {why}"))
    p.emit("Warning", "SavepointFailed", f"Savepoint {op.savepoint_path} ({op.trigger or op.kind}) failed: {why}")
    p.update(last_error=clip(f"savepoint failed: {why}"))
    if op.kind is OpKind.delete:
        p.emit("Warning", "Deleting", "Deleting without a final savepoint")
        p.op_update(phase=Phase.stopping, trigger_id=None)
        p.again(0)
        return
    p.update(operation=None, state=LifecycleState.running)
    if op.kind in (OpKind.upgrade, OpKind.suspend):
        what = "upgrade" if op.kind is OpKind.upgrade else "suspend"
        message = (f"The {what} was not done because its savepoint failed ({why}); the running job was kept. "
                   "It is retried on the next spec change or savepointNonce.")
        p.block("SavepointFailed", message, op.target_spec_hash)
        p.emit("Warning", f"{what.capitalize()}Aborted", message)
    p.again(0)


def retention(p: Pass) -> None:
    sp = p.spec.savepoint
    history = p.st.savepoint_history
    if sp is None or not history:
        return
    op = p.st.operation
    protected = {history[0].path, p.st.restored_from, op.savepoint_path if op else None}
    max_age = parse_duration(sp.retention.max_age) if sp.retention.max_age else None
    keep, drop = [], []
    for i, info in enumerate(history):
        taken = parse_time(info.time)
        too_old = max_age is not None and taken is not None and p.now - taken > max_age
        if (i >= sp.retention.count or too_old) and info.path not in protected:
            drop.append(info)
        else:
            keep.append(info)
    if not drop:
        return
    p.update(savepoint_history=keep)
    for info in drop:
        p.actions.append(DeleteSavepoint(info.path))
    p.emit("Normal", "SavepointsPruned",
           f"Pruned {len(drop)} savepoint(s) beyond retention (count {sp.retention.count}"
           f"{f', maxAge {sp.retention.max_age}' if sp.retention.max_age else ''}): {', '.join(i.path for i in drop)}")


# a savepoint operation never stops its driver; should a recorded one reach Stopping, it deploys again
STEPS = Steps(
    after_stopping=rollout.deploy_target,
    started=rollout.started,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
)
