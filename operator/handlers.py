"""The kopf glue: thin handlers that run reconcile passes (observe -> decide -> write status -> act).

Registered when ``streamjob_operator.main`` imports this module before
starting kopf. Every trigger — create/update/resume of a StreamJob, a timer,
any change of a driver pod (so a failure is acted on within a second), and
deletion (with kopf's finalizer) — runs the same level-based pass; handlers
never branch on what triggered them, except for the queue: the handlers are
coroutines that hand the pass to ``passes.Passes`` (``PASSES``), events ahead of
timer ticks; the timer is one thread for all jobs, not a kopf timer per job, and
gives a worker only to the jobs that are due (the idle gate, ``_gate``). A per-job
lock serialises passes of one job inside this process; the leader Lease (main)
keeps other replicas out, and its fence (``Settings.fence``) runs before every
write the actor makes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import kopf

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator import metrics
from streamjob_operator.dispatch import URGENT
from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL, DeletionSpec, SpecError, StreamJobSpec, parse_spec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.k8s.act import ActionFailed, Actor, Outcome, describe_action, no_fence
from streamjob_operator.k8s.cache import ReadCache
from streamjob_operator.k8s.clients import Clients, S3Limits, load_api_client
from streamjob_operator.k8s.errors import describe_error
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.decide.conditions import record_problems
from streamjob_operator.reconcile.decide.context import FORCE_DELETE_GRACE_SECONDS
from streamjob_operator.reconcile.model import Decision, Event, Observations, PodPhase, Problem
from streamjob_operator.reconcile.observe import observe
from streamjob_operator.passes import TIMER_SECONDS, Passes
from streamjob_operator.progress import Progress
from streamjob_operator.reconcile.policy import parse_time
from streamjob_operator.slots import DEFAULT_LIMIT, UpgradeSlots

log = logging.getLogger("streamjob_operator")

MAX_PASSES = 12  # passes chained in one handler call while each asks to go on at once
SETTLED_STATES = frozenset({LifecycleState.suspended, LifecycleState.failed, LifecycleState.finished})
ENDED_PHASES = frozenset({PodPhase.failed, PodPhase.succeeded})
IDLE_SECONDS = 60.0  # between timer passes of a settled job with no driver (suspended, failed, finished)
WORKERS = 16
FAILED_PASS_RETRY_SECONDS = 5.0
POLL_JITTER = 0.1  # a Ready job's next poll comes up to this fraction of the poll interval late
DELETION_SLACK_SECONDS = 30  # beyond decide's own forced deletion, before the glue gives up on failing passes


@dataclass
class Settings:
    """Operator-wide settings, filled in by main before kopf starts."""

    layout: RuntimeLayout = field(default_factory=RuntimeLayout)
    repartition_supported: bool = True
    s3_limits: S3Limits = field(default_factory=S3Limits)
    write_timeout: float | None = None  # seconds a status write may take (the Lease margin); None: the client's own
    timer_seconds: float = TIMER_SECONDS
    idle_seconds: float = IDLE_SECONDS
    workers: int = WORKERS
    read_cache: bool = True  # passes read StreamJobs and driver pods from the watches (k8s.cache)
    upgrade_slots: UpgradeSlots = field(default_factory=lambda: UpgradeSlots(DEFAULT_LIMIT))
    progress: Progress = field(default_factory=Progress)  # the driver poll and progress write budgets
    fence: Callable[[], None] = no_fence  # LeaderElector.ensure_leading when elected


SETTINGS = Settings()
_state: dict[str, Any] = {}
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()
# the pass queue and the timer: passes run measured(), on SETTINGS.workers threads; the timer visits every job the
# watch has delivered and not deleted
PASSES = Passes(lambda key: measured(*key), lambda: SETTINGS.progress.known(), lambda: SETTINGS.workers)


def _clients() -> Clients:
    if "clients" not in _state:
        _state["clients"] = Clients(load_api_client(lambda: SETTINGS.fence(), lambda: SETTINGS.write_timeout, pool_size=SETTINGS.workers + 2), SETTINGS.layout, SETTINGS.s3_limits, cache=ReadCache(SETTINGS.read_cache), fence=lambda: SETTINGS.fence())
    clients: Clients = _state["clients"]
    return clients


def _lock(namespace: str, name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def wait_idle(timeout: float) -> bool:
    """True once no pass runs (every pass holds its job's lock), within ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    with _locks_guard:
        locks = list(_locks.values())
    for lock in locks:
        if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        lock.release()
    return True


def _status_of(body: dict[str, Any]) -> StreamJobStatus:
    raw = dict(body.get("status") or {})
    known = {f.alias or n for n, f in StreamJobStatus.model_fields.items()}
    return StreamJobStatus.model_validate({k: v for k, v in raw.items() if k in known})


class PassFailed(Exception):
    """A pass that could not observe or write status; what failed is already in status or an event."""


def reconcile(namespace: str, name: str) -> Decision | None:
    """Runs passes for one job until it needs nothing right now; returns the last decision.

    Every error of a pass — reading the world, writing status, acting — is reported
    in the job's status (``reconcileError`` and the Degraded condition) and as an
    event within that pass, and raises ``PassFailed`` when the pass could not finish.
    """
    clients = _clients()
    actor = Actor(clients, SETTINGS.fence, SETTINGS.write_timeout)
    with _lock(namespace, name):
        decision: Decision | None = None
        observations: Observations | None = None
        fresh = False  # a GET instead of the read cache: after a conflict, the cache may be the stale side
        for _ in range(MAX_PASSES):
            body = clients.get_streamjob(namespace, name, fresh=fresh)
            fresh = False
            if body is None:
                metrics.forget_job(namespace, name)
                clients.cache.forget(namespace, name)
                SETTINGS.upgrade_slots.forget((namespace, name))
                SETTINGS.progress.forget((namespace, name))
                PASSES.wake((namespace, name))
                return None
            meta = body["metadata"]
            owner = Owner(name, namespace, meta["uid"])
            generation = int(meta.get("generation") or 1)
            version: str | None = meta.get("resourceVersion")  # every status write of this pass is conditional on it
            stored = _status_of(body)
            status = SETTINGS.progress.overlay((namespace, name), stored)  # with the progress not written yet
            now = datetime.now(timezone.utc)
            try:
                spec = parse_spec(body.get("spec"))
            except SpecError as err:
                # a spec stored before a stricter CRD (an operator upgrade): said in status and an event, never acted on
                _report(actor, owner, status, [Problem("InvalidSpec", str(err))], now, generation, version)
                raise kopf.PermanentError(str(err)) from None
            try:
                observations = observe(clients, body, spec, status, now, SETTINGS.repartition_supported,
                                       SETTINGS.progress.poll_seconds())
            except Exception as err:
                _report(actor, owner, status, [describe_error(err, "reading the job's driver pods")], now, generation, version)
                raise PassFailed(str(err)) from err
            decision = _decide((namespace, name), spec, status, observations, now)
            metrics.record_pass(namespace, name, status, decision.status, decision.events, now)
            if decision.status != stored and not SETTINGS.progress.defer((namespace, name), stored, decision, now):
                try:
                    version = actor.write_status(owner, decision.status, version)  # the write-ahead log: before any action
                    SETTINGS.progress.written((namespace, name))
                except Exception as err:  # nothing may be acted on that status does not record
                    if getattr(err, "status", None) == 409:  # written since this pass read it: decide again on a fresh read
                        log.info("Status changed since read streamjob=%s/%s resourceVersion=%s; passing again", namespace, name, version)
                        fresh = True
                        continue
                    _post(actor, owner, [Event("Warning", "StatusWriteFailed", describe_error(err, "writing status").message)])
                    raise PassFailed(str(err)) from err
            SETTINGS.upgrade_slots.released((namespace, name))  # status no longer shows an upgrade the decision ended
            # a pass's events follow its status write, as its actions do: an event tells of a transition that status
            # already records. Posted first, an event of a pass whose status write then fails (a conflict, a lost
            # Lease, an admission refusal) would announce what never happened, and the retried pass would announce
            # it again. Events are best effort in Kubernetes anyway (rate-limited, aggregated, expired after an
            # hour); what a user must be able to rely on is in status (state, lastError, the Degraded reason).
            _post(actor, owner, decision.events)
            acted, problems = _act(actor, owner, spec, decision, observations)
            # at most one more status write, after acting: what the actions learned and what failed
            if problems:
                _report(actor, owner, acted, problems, now, generation, version)
            elif acted.reconcile_error is not None and not observations.problems:
                # the pass that failed before went through: clear the error, and decide Degraded again at once
                _write(actor, owner, acted.model_copy(update={"reconcile_error": None}), version)
                log.info("Cleared reconcile error streamjob=%s/%s reason=%s", namespace, name, acted.reconcile_error.reason)
                continue
            elif acted != decision.status:
                _write(actor, owner, acted, version)
            if decision.deletion_done:
                metrics.forget_job(namespace, name)
                break
            if decision.requeue_after != 0:
                break
        _gate(namespace, name, decision, observations)
        return decision


def _decide(key: tuple[str, str], spec: StreamJobSpec, status: StreamJobStatus, observations: Observations,
            now: datetime) -> Decision:
    """``decide`` with the job's upgrade slot: whether one is free is an observation, and whether the decision holds
    one is recorded before its status is written (``slots``: the operator-wide --max-concurrent-upgrades)."""
    return SETTINGS.upgrade_slots.decide_with_slot(
        key, lambda free: decide(spec, status, replace(observations, upgrade_slot=free), now))


def settled(decision: Decision, observations: Observations) -> bool:
    """A job nothing is pending for: a terminal state with no live driver (a failed or succeeded pod kept for its
    logs changes only by an event), no operation, error or requeue hint; its next pass can wait for a trigger
    (spec change, driver pod event) or the idle interval."""
    st = decision.status
    return (
        st.state is not None and st.state in SETTLED_STATES and st.operation is None and st.reconcile_error is None
        and decision.requeue_after is None and not decision.actions and not observations.problems
        and all(pod.phase in ENDED_PHASES and not pod.deleting for pod in observations.drivers)
    )


def steady_for(decision: Decision, observations: Observations, now: datetime, poll_seconds: float) -> float:
    """Seconds a running, Ready job with nothing pending can go without a timer pass: until its next
    ``/status`` poll is due (``poll_seconds`` after the last one: ``progress.Progress.poll_seconds``). 0 for
    any other job.

    Such a job's timer pass between polls reads only the cache and decides nothing new; at 1,000 jobs
    those passes (one per job every 2 s) were most of the operator's CPU. What can change it comes as
    an event (a spec change, a driver pod event, deletion) and runs a pass at once, as for a settled
    job; what the timer alone finds (a periodic savepoint due, the restart count's reset) waits at most
    one poll interval."""
    st = decision.status
    if not (st.state is LifecycleState.running and st.ready and st.operation is None and st.reconcile_error is None
            and decision.requeue_after is None and not decision.actions and not observations.problems
            and st.job is not None and st.job.observed_at):
        return 0.0
    seen = parse_time(st.job.observed_at)
    if seen is None:
        return 0.0
    return max(0.0, poll_seconds - (now - seen).total_seconds())


def _gate(namespace: str, name: str, decision: Decision | None, observations: Observations | None) -> None:
    """How long the job may go without a timer pass: a settled job's idle interval, a Ready job's time to its next
    poll, else none (``PASSES.due`` says when it is over)."""
    key = (namespace, name)
    if decision is not None and observations is not None and settled(decision, observations):
        PASSES.rest(key, SETTINGS.idle_seconds)
    elif decision is not None and observations is not None and (
            wait := steady_for(decision, observations, datetime.now(timezone.utc), poll := SETTINGS.progress.poll_seconds())):
        # plus up to POLL_JITTER of the interval: jobs that became Ready together (created at once) drift apart
        # instead of polling, and writing their progress, in bursts
        PASSES.rest(key, wait + random.uniform(0.0, POLL_JITTER * poll))
    else:
        PASSES.wake(key)


def _post(actor: Actor, owner: Owner, events: Iterable[Event]) -> None:
    for event in events:
        log.log(logging.WARNING if event.type == "Warning" else logging.INFO,
                "Recorded event streamjob=%s/%s reason=%s message=%s", owner.namespace, owner.name, event.reason, event.message)
        actor.emit(owner, event)


def _write(actor: Actor, owner: Owner, status: StreamJobStatus, version: str | None = None) -> None:
    try:
        actor.write_status(owner, status, version)
        SETTINGS.progress.written((owner.namespace, owner.name))
    except Exception as err:
        log.warning("Failed to write status streamjob=%s/%s error=%s", owner.namespace, owner.name, err)


def _report(actor: Actor, owner: Owner, status: StreamJobStatus, problems: list[Problem], now: datetime, generation: int,
            version: str | None = None) -> None:
    """What the API server or S3 refused: into status (reconcileError, Degraded) and an event."""
    for problem in problems:
        log.warning("Failed pass streamjob=%s/%s reason=%s error=%s", owner.namespace, owner.name, problem.reason, problem.message)
    reported, events = record_problems(status, problems, now, generation)
    _write(actor, owner, reported, version)
    _post(actor, owner, events)


def _act(actor: Actor, owner: Owner, spec: StreamJobSpec, decision: Decision,
         observations: Observations) -> tuple[StreamJobStatus, list[Problem]]:
    """Executes the decided actions; returns the decided status with what the actions learned (the savepoint
    request's id), and what failed (each action is retried by a later pass)."""
    status = decision.status
    problems: list[Problem] = []
    pod_ips = {pod.name: pod.ip for pod in observations.drivers}  # as observed this pass: no second listing
    for action in decision.actions:
        try:
            outcome = actor.execute(owner, spec, action, pod_ips)
        except ActionFailed as err:
            problems.append(Problem(err.reason, str(err)))
            continue
        except Exception as err:
            problems.append(describe_error(err, describe_action(action)))
            continue
        if isinstance(outcome, Outcome) and status.operation is not None:
            status = status.model_copy(update={"operation": status.operation.model_copy(update={"trigger_id": outcome.trigger_id})})
    return status, problems


# --- kopf handlers --------------------------------------------------------------------------------


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 2  # kopf's own pool: the handlers below are coroutines, passes run in PASSES
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    PASSES.start_timer(SETTINGS.timer_seconds)


@kopf.on.cleanup()
def stop_timer(**_: Any) -> None:
    """kopf stops (the operator exits or loses the Lease): no timer pass is asked for from here on."""
    PASSES.stop_timer()


def measured(namespace: str, name: str) -> Decision | None:
    """``reconcile`` counted and timed for /metrics, by outcome (success, error, permanent)."""
    outcome = "error"
    started = time.monotonic()
    metrics.RECONCILE_IN_FLIGHT.inc()
    try:
        decision = reconcile(namespace, name)
        outcome = "success"
        return decision
    except kopf.PermanentError:
        outcome = "permanent"
        raise
    except PassFailed:  # already in status and an event: the timer tries again after a pause, events at once
        PASSES.rest((namespace, name), FAILED_PASS_RETRY_SECONDS)
        raise
    finally:
        metrics.RECONCILE_IN_FLIGHT.dec()
        metrics.RECONCILE_PASSES.labels(outcome).inc()
        metrics.RECONCILE_DURATION.labels(outcome).observe(time.monotonic() - started)
        if outcome != "success":
            metrics.RECONCILE_ERRORS.labels(outcome).inc()


async def _pass(namespace: str, name: str, priority: int) -> Decision | None:
    """The job's next pass on a worker (joining one already waiting), awaited in the event loop."""
    return await asyncio.wrap_future(PASSES.submit((namespace, name), priority))


async def _run(namespace: str, name: str, priority: int) -> Decision | None:
    try:
        return await _pass(namespace, name, priority)
    except PassFailed as err:  # already in status and an event: retry soon, without a traceback
        raise kopf.TemporaryError(f"pass failed: {err}", delay=FAILED_PASS_RETRY_SECONDS) from None


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
async def on_streamjob_event(type: str | None, body: kopf.Body, **_: Any) -> None:  # noqa: A002 - kopf's kwarg
    """Every version of every StreamJob the watch delivers goes into the read cache (no pass runs here, but for a
    deletion: the job's last pass is queued).

    In the event loop, at once (see ``on_driver_pod``)."""
    job, meta = dict(body), body.get("metadata") or {}
    key, deleted = (meta.get("namespace") or "default", str(meta.get("name"))), type == "DELETED"
    _clients().cache.saw_job(job, deleted=deleted)
    SETTINGS.upgrade_slots.saw(key, job, deleted=deleted)
    SETTINGS.progress.saw(key, deleted=deleted)
    if deleted:  # a last pass: it finds the job gone (a GET answers 404) and drops what this process kept for it
        PASSES.submit(key, URGENT)


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL)
async def on_change(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> None:
    _clients().cache.saw_job(dict(body))
    await _run(namespace or "default", name, URGENT)


@kopf.on.event("", "v1", "pods", labels={names.LABEL_ROLE: names.ROLE_DRIVER, names.LABEL_MANAGED_BY: names.MANAGED_BY})
async def on_driver_pod(namespace: str | None, labels: Mapping[str, str], type: str | None, body: kopf.Body,  # noqa: A002
                        **_: Any) -> None:
    """A driver pod's event: into the read cache at once, in the event loop; then an urgent pass of its job.

    The cache is fed here, not in the worker: a synchronous handler waits for a free worker like every pass,
    and with a backlog of passes (1,000 jobs created at once) the passes read pods minutes old, so a driver
    running for minutes still looked Pending and its readiness deadline restarted it."""
    job = labels.get(names.LABEL_JOB)
    if not job or not namespace:
        return
    _clients().cache.saw_pod(job, dict(body), deleted=type == "DELETED")
    if type is not None:  # type None: the initial listing, covered by on.resume
        await _pass(namespace, job, URGENT)


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL)
async def on_delete(namespace: str | None, name: str, meta: Mapping[str, Any], spec: Mapping[str, Any], body: kopf.Body,
                    **_: Any) -> None:
    """Deletion is bounded: past spec.deletion.timeoutSeconds (plus the force-delete grace) the finalizer is
    released even when every pass fails, with an event saying what was skipped."""
    ns = namespace or "default"
    _clients().cache.saw_job(dict(body))  # its deletionTimestamp, whichever handler kopf runs first
    try:
        decision = await _pass(ns, name, URGENT)
        if decision is None or decision.deletion_done:
            return
        why, delay = "waiting for the driver to stop", max(1.0, decision.requeue_after or 1.0)
    except PassFailed as err:
        why, delay = f"the deletion pass failed: {err}", FAILED_PASS_RETRY_SECONDS
    timeout = _deletion_timeout(spec)
    requested = parse_time(meta.get("deletionTimestamp"))
    limit = timedelta(seconds=timeout + FORCE_DELETE_GRACE_SECONDS + DELETION_SLACK_SECONDS)
    if requested is not None and datetime.now(timezone.utc) >= requested + limit:
        message = (f"Deletion did not finish within spec.deletion.timeoutSeconds={timeout}s ({why}); released the finalizer. "
                   "Skipped: stopping the driver and deleting the job's objects through the operator; Kubernetes garbage "
                   "collection deletes them through their owner references. Savepoints and checkpoints in S3 are kept.")
        log.warning("Released finalizer streamjob=%s/%s reason=DeletionTimedOut why=%s", ns, name, why)
        await asyncio.to_thread(Actor(_clients(), SETTINGS.fence).emit, Owner(name, ns, str(meta.get("uid") or "")),
                                Event("Warning", "DeletionTimedOut", message))
        metrics.forget_job(ns, name)
        return
    raise kopf.TemporaryError(why, delay=delay)


def _deletion_timeout(spec: Mapping[str, Any]) -> int:
    try:
        return parse_spec(dict(spec)).deletion.timeout_seconds
    except SpecError:
        return int(DeletionSpec.model_fields["timeout_seconds"].default)
