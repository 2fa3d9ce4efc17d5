"""Conditions and progress: what status says about the job after a pass (Ready, Progressing, Degraded, Savepointing,
Reconciling, Stalled).

Pure. Called by ``reconcile.decide.flow``: ``record_progress`` first (what the
driver reported, and what observe could not read), ``conditions`` last
(observations of the decided status, set on every pass, transition times kept
while a status holds). Ready, Reconciling and Stalled follow the kstatus
conventions (sigs.k8s.io/cli-utils) that Flux and ``kubectl wait`` read: Ready
is True when the job is where its spec puts it (running and ready, or
suspended), Reconciling is True while the operator works towards the spec,
Stalled is True when it will not get there without a change (docs/gitops.md). ``record_problems`` is called by the kopf glue after
acting, with what the API server or S3 refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import (
    CheckpointInfo,
    Condition,
    JobMetrics,
    OpKind,
    Phase,
    ReconcileError,
    StreamJobStatus,
)

from ..model import Event, Problem
from ..policy import fmt_time
from .context import UPGRADE_QUEUED, Pass, clip

ORDER = ["Ready", "Progressing", "Degraded", "Savepointing", "Reconciling", "Stalled"]
# states the operator leaves only on a spec or nonce change, though the spec asks for a running job
STUCK = (LifecycleState.failed, LifecycleState.finished, LifecycleState.rolling_back)
MOVING = (LifecycleState.deploying, LifecycleState.upgrading, LifecycleState.restarting, LifecycleState.suspending)


def record_progress(p: Pass) -> None:
    job = p.obs.job
    batch: int | None = None
    if job is not None and job.runtime is not None:
        p.update(job=JobMetrics.of(job.runtime, observed_at=p.t()))
        batch = job.runtime.latest_completed_batch
    if batch is None:
        batch = p.obs.checkpoint_batch
    last = p.st.last_checkpoint
    if batch is not None and (last is None or last.batch_id != batch):
        p.update(last_checkpoint=CheckpointInfo(batch_id=batch, time=p.t()))
    if p.obs.problems:
        error, event = merge_problems(p.st.reconcile_error, p.obs.problems, p.now)
        p.update(reconcile_error=error)
        if event is not None:
            p.events.append(event)


def merge_problems(prior: ReconcileError | None, problems: Sequence[Problem], now: datetime) -> tuple[ReconcileError, Event | None]:
    """The first problem becomes status.reconcileError; an event is posted when its reason is new."""
    first = problems[0]
    more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
    message = clip(first.message + more)
    if prior is not None and prior.reason == first.reason:
        return prior.model_copy(update={"message": message, "count": prior.count + 1}), None
    error = ReconcileError(reason=first.reason, message=message, time=fmt_time(now), count=1)
    return error, Event("Warning", first.reason, message)


def record_problems(status: StreamJobStatus, problems: Sequence[Problem], now: datetime, generation: int) -> tuple[StreamJobStatus, tuple[Event, ...]]:
    """After acting: what the API server or S3 refused goes into status (reconcileError, Degraded) and an event."""
    error, event = merge_problems(status.reconcile_error, problems, now)
    status = status.model_copy(update={"reconcile_error": error})
    blocked = status.blocked_change
    if status.state is not LifecycleState.failed:
        reason, message = (blocked.reason, blocked.message) if blocked is not None else (error.reason, "")
        status = with_condition(status, "Degraded", "True", reason, also(message, error), generation, fmt_time(now))
    return status, (event,) if event is not None else ()


def also(message: str, error: ReconcileError | None) -> str:
    """A condition's message, with the current reconcile error after it (the error alone when there is no message)."""
    if error is None:
        return message
    return f"{message} Also: {error.reason}: {error.message}" if message else error.message


def conditions(p: Pass) -> None:
    st = p.st
    op = st.operation
    ready = p.job_ready() and st.state not in (LifecycleState.deleting, LifecycleState.suspended, LifecycleState.failed)
    if ready and not p.before.ready:
        batch = st.last_checkpoint.batch_id if st.last_checkpoint else None
        p.emit("Normal", "JobReady", f"Driver {st.driver_pod} is running and completed batch {batch}")
    elif not ready and p.before.ready and st.state is LifecycleState.running and op is None:
        p.emit("Warning", "JobNotReady", f"Driver {st.driver_pod} is no longer ready")
    p.update(ready=ready)

    state = st.state or "Pending"
    if ready:
        set_condition(p, "Ready", "True", "Running", f"Driver {st.driver_pod} is running and completing batches")
    elif st.state is LifecycleState.suspended and op is None:
        # suspended is where the spec puts the job: kstatus must see it as Current, not forever in progress
        set_condition(p, "Ready", "True", "Suspended", "The job is suspended as its spec asks; no driver runs")
    else:
        set_condition(p, "Ready", "False", state if st.state is not LifecycleState.running else "Starting",
                      st.last_error if st.state is LifecycleState.failed and st.last_error else f"The job is {state}")

    if op is not None:
        set_condition(p, "Progressing", "True", op.kind.progress_reason,
                      f"{op.kind} {op.phase}: {op.message}" if op.message else f"{op.kind} {op.phase}")
    elif p.queued is not None:
        set_condition(p, "Progressing", "True", UPGRADE_QUEUED, p.queued)
    elif st.blocked_change is not None:
        set_condition(p, "Progressing", "False", st.blocked_change.reason, st.blocked_change.message)
    else:
        set_condition(p, "Progressing", "False", "Reconciled", f"Generation {p.obs.generation} is rolled out")

    existing = find(p, "Degraded")
    cur = p.current
    starting = op is not None and op.phase in (Phase.deploying, Phase.awaiting_ready)
    stuck = cur.waiting_reason if cur is not None and cur.alive and starting else None
    error = st.reconcile_error
    # a failure or a blocked change is the lasting state and keeps the reason; a current API/S3 error rides along
    if st.state is LifecycleState.failed:
        if p.failure is not None:
            set_condition(p, "Degraded", "True", *p.failure)
        elif existing is None or existing.status != "True":
            set_condition(p, "Degraded", "True", "Failed", st.last_error or "The job failed")
        else:
            set_condition(p, "Degraded", "True", existing.reason, existing.message)
    elif st.blocked_change is not None:
        set_condition(p, "Degraded", "True", st.blocked_change.reason, also(st.blocked_change.message, error))
    elif error is not None:
        set_condition(p, "Degraded", "True", error.reason, error.message)
    elif stuck is not None and cur is not None:
        message = f"Driver pod {cur.name} cannot start: {cur.message}; given up at {op.deadline if op else None}"
        if existing is None or existing.reason != stuck:
            p.emit("Warning", stuck, message)
        set_condition(p, "Degraded", "True", stuck, message)
    elif st.restart_count > 0 and not ready:
        set_condition(p, "Degraded", "True", "DriverFailed", st.last_error or "The driver failed and is being restarted")
    else:
        set_condition(p, "Degraded", "False", "AsExpected", "")

    kstatus_conditions(p, ready)

    if op is not None and op.phase is Phase.savepointing:
        set_condition(p, "Savepointing", "True", "InProgress", f"Savepoint {op.savepoint_path} ({op.trigger or op.kind}) in progress")
    elif p.savepoint_result is not None:
        set_condition(p, "Savepointing", "False", *p.savepoint_result)
    else:
        prior = find(p, "Savepointing")
        if prior is None or prior.status == "True":
            set_condition(p, "Savepointing", "False", "Idle", "No savepoint in progress")
        else:
            set_condition(p, "Savepointing", "False", prior.reason, prior.message)


def kstatus_conditions(p: Pass, ready: bool) -> None:
    """Reconciling and Stalled, the abnormal-true conditions of kstatus: at most one of them is True."""
    st, op = p.st, p.st.operation
    degraded = find(p, "Degraded")
    stalled: tuple[str, str] | None = None
    if st.state in STUCK and st.state is not LifecycleState.rolling_back:
        reason = degraded.reason if degraded is not None and degraded.status == "True" else st.state
        stalled = (reason, st.last_error or (degraded.message if degraded else "") or f"The job is {st.state}")
        if st.state is LifecycleState.finished:
            stalled = ("Finished", "The query finished by itself; change restartNonce to run it again")
    elif st.state is LifecycleState.rolling_back or (op is not None and op.kind is OpKind.rollback):
        stalled = ("RollingBack", f"Generation {p.obs.generation} failed to roll out and is being rolled back")
    elif st.blocked_change is not None and op is None and p.blocked():
        # only while the blocked spec is still the spec: a later edit (e.g. reverting it while suspending) is met
        stalled = (st.blocked_change.reason, st.blocked_change.message or "The change to the spec was not rolled out")
    if stalled is not None:
        set_condition(p, "Reconciling", "False", "Stalled", "The operator waits for a change to the spec")
        set_condition(p, "Stalled", "True", *stalled)
        return
    set_condition(p, "Stalled", "False", "AsExpected", "")
    if op is not None:
        set_condition(p, "Reconciling", "True", op.kind.progress_reason,
                      f"{op.kind} {op.phase}: {op.message}" if op.message else f"{op.kind} {op.phase}")
    elif p.queued is not None:
        set_condition(p, "Reconciling", "True", UPGRADE_QUEUED, p.queued)
    elif st.next_restart_at is not None:
        set_condition(p, "Reconciling", "True", "RestartScheduled", f"The driver is restarted at {st.next_restart_at}")
    elif st.state in MOVING or st.state is None:
        set_condition(p, "Reconciling", "True", st.state or "Pending", f"The job is {st.state or 'Pending'}")
    elif st.state is LifecycleState.running and not ready:
        set_condition(p, "Reconciling", "True", "Starting", "The driver runs and has not completed a batch yet")
    else:
        set_condition(p, "Reconciling", "False", "Reconciled", f"Generation {p.obs.generation} is rolled out")


def find(p: Pass, type_: str) -> Condition | None:
    return next((c for c in p.st.conditions if c.type == type_), None)


def set_condition(p: Pass, type_: str, status: str, reason: str, message: str) -> None:
    p.st = with_condition(p.st, type_, status, reason, message, p.obs.generation, p.t())


def with_condition(st: StreamJobStatus, type_: str, status: str, reason: str, message: str, generation: int, now: str) -> StreamJobStatus:
    """Sets one condition; its transition time moves only when its status changes."""
    prior = next((c for c in st.conditions if c.type == type_), None)
    changed = prior is None or prior.status != status
    new = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=clip(message),
        observed_generation=generation,
        last_transition_time=now if changed or prior is None else prior.last_transition_time,
    )
    others = [c for c in st.conditions if c.type != type_]
    merged = sorted(others + [new], key=lambda c: ORDER.index(c.type) if c.type in ORDER else len(ORDER))
    return st.model_copy(update={"conditions": merged})
