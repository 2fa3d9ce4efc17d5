"""Deletion: an optional bounded final savepoint, stop the driver, delete owned objects, release the finalizer.

Pure. Called by ``flow`` on the first pass of a job with a deletionTimestamp;
``flow`` hands ``STEPS`` to the shared phases on the later ones.
"""

from __future__ import annotations

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind, Operation, Phase

from ..model import DeleteOwnedObjects
from . import restart, rollout
from .context import Pass, Steps


def start_deletion(p: Pass) -> None:
    """The job has a deletionTimestamp and no delete operation yet: abandon any other, start this one."""
    op = p.st.operation
    deadline = p.t(p.spec.deletion.timeout_seconds)
    wants = p.spec.deletion.savepoint_on_delete and p.spec.savepoint is not None
    can = wants and p.running_driver() is not None and p.reachable() and p.st.state is not LifecycleState.failed
    if can:
        new = Operation(kind=OpKind.delete, phase=Phase.savepointing, savepoint_path=p.new_savepoint_path("delete"),
                        trigger="delete", started_at=p.t(), deadline=deadline, message="final savepoint before deletion")
        p.update(last_savepoint_attempt_at=p.t())
        p.emit("Normal", "Deleting", f"Deleting: taking a final savepoint to {new.savepoint_path} (at most {p.spec.deletion.timeout_seconds}s)")
    else:
        new = Operation(kind=OpKind.delete, phase=Phase.stopping, started_at=p.t(), deadline=deadline, message="deleting")
        note = "; savepointOnDelete is set but the job is not running, so no final savepoint" if wants else ""
        p.emit("Normal", "Deleting", f"Deleting: stopping the driver{note}")
    if op is not None:
        p.emit("Warning", "OperationAbandoned", f"Abandoned {op.kind} ({op.phase}) for deletion")
    p.update(operation=new, state=LifecycleState.deleting)
    p.again(0)


def finish_deletion(p: Pass) -> None:
    p.deletion_done = True
    p.update(driver_pod=None, ready=False)
    p.op_update(phase=Phase.done)
    p.actions.append(DeleteOwnedObjects())
    p.emit("Normal", "Deleted", "Driver stopped and owned objects deleted; removing the finalizer")


STEPS = Steps(
    after_stopping=finish_deletion,
    started=rollout.started,
    exited_while_starting=restart.exited_while_starting,
    not_started=restart.not_started,
    force_at_deadline=True,  # a deletion finishes by its deadline, garbage collection removes what is left
)
