"""Prometheus metrics of the operator and of every job it runs, served on ``/metrics``.

Called by ``streamjob_operator.handlers`` after every reconcile pass
(``record_pass``) and when a job is gone (``forget_job``), and by
``streamjob_operator.main`` (``serve``, leader status). Everything here is
derived from what the pass already read and decided — the job's status
before and after, and the decision's events — so scraping never reaches a
driver, S3 or the API server.

Per-job series carry only ``namespace`` and ``streamjob`` labels (not ``job``:
Prometheus sets that one to the scrape job) (plus a bounded
enum label such as ``state``); ages (``now - time``) are computed when
Prometheus scrapes, from the times the last pass recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from streamjob_contract.httpserve import BoundedHandler, BoundedHTTPServer
from streamjob_contract.runtime_status import watermark_ms
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import JobMetrics, StorageHygiene, StreamJobStatus
from streamjob_operator.reconcile.model import Event

REGISTRY = CollectorRegistry(auto_describe=True)
PREFIX = "streamjob"

_PASS_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_OPERATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_SIZE_BUCKETS = tuple(float(4**k * 1024) for k in range(2, 14))  # 16 KiB .. 64 GiB

RECONCILE_PASSES = Counter(f"{PREFIX}_reconcile_passes", "Reconcile handler calls, by outcome (success, error, permanent).",
                           ["outcome"], registry=REGISTRY)
RECONCILE_ERRORS = Counter(f"{PREFIX}_reconcile_errors", "Reconcile handler calls that failed, by outcome (error, permanent).",
                           ["outcome"], registry=REGISTRY)
RECONCILE_DURATION = Histogram(f"{PREFIX}_reconcile_duration_seconds", "Duration of a reconcile handler call, by outcome.",
                               ["outcome"], buckets=_PASS_BUCKETS, registry=REGISTRY)
RECONCILE_IN_FLIGHT = Gauge(f"{PREFIX}_reconcile_in_flight",
                            "Reconcile handler calls running now, one per busy pass worker (at most --workers).", registry=REGISTRY)
RESTARTS = Counter(f"{PREFIX}_restarts", "Driver failures that led to a restart, over all jobs.", registry=REGISTRY)
SAVEPOINTS = Counter(f"{PREFIX}_savepoints", "Savepoints finished, by trigger and outcome (completed, failed).",
                     ["trigger", "outcome"], registry=REGISTRY)
SAVEPOINT_DURATION = Histogram(f"{PREFIX}_savepoint_duration_seconds", "From savepoint trigger to completion or failure, by trigger.",
                               ["trigger"], buckets=_OPERATION_BUCKETS, registry=REGISTRY)
SAVEPOINT_SIZE = Histogram(f"{PREFIX}_savepoint_size_bytes", "Size of completed savepoints (the files their manifest lists), by trigger.",
                           ["trigger"], buckets=_SIZE_BUCKETS, registry=REGISTRY)
UPGRADES = Counter(f"{PREFIX}_upgrades", "Upgrades that completed (the new spec ran a batch).", registry=REGISTRY)
UPGRADE_DURATION = Histogram(f"{PREFIX}_upgrade_duration_seconds", "From the start of an upgrade to its completion.",
                             buckets=_OPERATION_BUCKETS, registry=REGISTRY)
ROLLBACKS = Counter(f"{PREFIX}_rollbacks", "Upgrades rolled back to the last stable spec.", registry=REGISTRY)
ROLLBACK_DURATION = Histogram(f"{PREFIX}_rollback_duration_seconds", "From the start of the failed upgrade to the rollback.",
                              buckets=_OPERATION_BUCKETS, registry=REGISTRY)
FAILURE_REACTION = Histogram(f"{PREFIX}_failure_reaction_seconds",
                             "From the pass that saw a driver fail to the one that created its replacement (includes restart backoff).",
                             buckets=_OPERATION_BUCKETS, registry=REGISTRY)
PASSES_WAITING = Gauge(f"{PREFIX}_passes_waiting",
                       "Reconcile passes waiting for a worker, by priority (urgent: a driver pod, spec change or deletion "
                       "asked for it; routine: a timer).", ["priority"], registry=REGISTRY)
UPGRADE_SLOTS_IN_USE = Gauge(f"{PREFIX}_upgrade_slots_in_use",
                             "Jobs running an upgrade or a rollback now (at most --max-concurrent-upgrades).", registry=REGISTRY)
UPGRADES_QUEUED = Gauge(f"{PREFIX}_upgrades_queued", "Changed jobs waiting for an upgrade slot (Progressing: UpgradeQueued).",
                        registry=REGISTRY)
DRIVER_POLL_INTERVAL = Gauge(f"{PREFIX}_driver_poll_interval_seconds",
                             "Seconds between two polls of a Ready job's driver (10, or more past --driver-polls-per-second x 10 jobs).",
                             registry=REGISTRY)
PROGRESS_WRITE_INTERVAL = Gauge(f"{PREFIX}_progress_write_interval_seconds",
                                "Seconds between two writes of a Ready job's progress to its status when nothing else changed "
                                "(10, or more past --progress-writes-per-second x 10 jobs).", registry=REGISTRY)
LEADER = Gauge(f"{PREFIX}_leader", "1 when this replica holds the leader Lease (or runs without leader election), else 0.",
               registry=REGISTRY)

PRIORITIES = ("urgent", "routine")
for _priority in PRIORITIES:
    PASSES_WAITING.labels(_priority)


def watch_operator(waiting: Callable[[str], int], slots_in_use: Callable[[], int], queued: Callable[[], int],
                   poll_interval: Callable[[], float], write_interval: Callable[[], float]) -> None:
    """The operator-wide gauges read at each scrape: ``waiting(priority)`` for each of ``PRIORITIES``, and the rest."""
    for priority in PRIORITIES:
        PASSES_WAITING.labels(priority).set_function(_reader(waiting, priority))
    UPGRADE_SLOTS_IN_USE.set_function(slots_in_use)
    UPGRADES_QUEUED.set_function(queued)
    DRIVER_POLL_INTERVAL.set_function(poll_interval)
    PROGRESS_WRITE_INTERVAL.set_function(write_interval)


def _reader(waiting: Callable[[str], int], priority: str) -> Callable[[], float]:
    return lambda: float(waiting(priority))


OUTCOMES = ("success", "error", "permanent")
SAVEPOINT_TRIGGERS = ("upgrade", "suspend", "manual", "periodic", "delete", "rollback")
# every bounded label value is exported from the start (at 0), so rate() and the dashboard have a series before the first event
for _outcome in OUTCOMES:
    RECONCILE_PASSES.labels(_outcome)
    RECONCILE_DURATION.labels(_outcome)
    if _outcome != "success":
        RECONCILE_ERRORS.labels(_outcome)
for _trigger in SAVEPOINT_TRIGGERS:
    SAVEPOINT_DURATION.labels(_trigger)
    SAVEPOINT_SIZE.labels(_trigger)
    for _result in ("completed", "failed"):
        SAVEPOINTS.labels(_trigger, _result)


@dataclass(frozen=True)
class JobSnapshot:
    """What the last pass left in a job's status, for the collector: the driver's figures as status
    shows them (``status.job``, a ``JobMetrics``: not re-declared here), times as epoch seconds."""

    state: str | None
    conditions: tuple[tuple[str, str], ...]
    total_restarts: int
    last_batch_id: int | None
    last_checkpoint_at: float | None
    last_savepoint_at: float | None
    job: JobMetrics | None = None

    @property
    def watermark(self) -> float | None:
        """The event-time watermark in epoch seconds; Spark reports epoch 0 before the first one: no lag then."""
        ms = watermark_ms(self.job.watermark) if self.job is not None and self.job.watermark else None
        return ms / 1000.0 if ms else None

    @property
    def storage(self) -> StorageHygiene | None:
        return self.job.storage if self.job is not None else None


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def snapshot(status: StreamJobStatus) -> JobSnapshot:
    return JobSnapshot(
        state=status.state.value if status.state is not None else None,
        conditions=tuple((c.type, c.status) for c in status.conditions),
        total_restarts=status.total_restarts,
        last_batch_id=status.last_checkpoint.batch_id if status.last_checkpoint else None,
        last_checkpoint_at=_epoch(status.last_checkpoint.time) if status.last_checkpoint else None,
        last_savepoint_at=_epoch(status.last_savepoint.time) if status.last_savepoint else None,
        job=status.job,
    )


# name, help, how to read it from a snapshot at scrape time `now`
_JOB_GAUGES: tuple[tuple[str, str], ...] = (
    ("job_last_committed_batch_id", "Latest committed micro-batch (the checkpoint's latest completed batch)."),
    ("job_last_committed_batch_age_seconds", "Seconds since the operator first saw the latest committed batch."),
    ("job_batch_duration_seconds", "Duration of the last micro-batch (Spark's triggerExecution)."),
    ("job_input_rows_per_second", "Input rate of the last micro-batch."),
    ("job_processed_rows_per_second", "Processing rate of the last micro-batch."),
    ("job_watermark_lag_seconds", "Now minus the event-time watermark (absent before the first watermark)."),
    ("job_state_rows", "Rows held in the streaming state, over all stateful operators."),
    ("job_state_memory_bytes", "Memory used by the state store, over all stateful operators."),
    ("job_late_rows_dropped_last_batch", "Rows of the last micro-batch dropped as later than the watermark."),
    ("job_last_checkpoint_age_seconds", "Seconds since the latest completed checkpoint was observed."),
    ("job_last_savepoint_age_seconds", "Seconds since the latest completed savepoint."),
    ("job_restarts", "Restarts after failures over the job's life (status.totalRestarts)."),
    ("job_storage_hygiene_failing", "1 when the driver's last storage hygiene pass could not delete something (status.job.storage.lastError), else 0."),
)

# counters the driver keeps since it started (they reset with a new driver: Prometheus' rate() handles that)
_JOB_COUNTERS: tuple[tuple[str, str, Callable[[JobSnapshot], int | None]], ...] = (
    ("job_late_rows_dropped", "Rows dropped as later than the watermark since the job's driver started (resets with a new driver).",
     lambda snap: snap.job.late_rows_dropped_total if snap.job else None),
    ("job_storage_pruned_run_dirs",
     "Superseded checkpoint run directories the job's driver deleted since it started (resets with a new driver).",
     lambda snap: snap.storage.pruned_run_dirs if snap.storage else None),
    ("job_storage_pruned_savepoint_dirs",
     "Abandoned savepoint directories the job's driver deleted since it started (resets with a new driver).",
     lambda snap: snap.storage.pruned_savepoint_dirs if snap.storage else None),
)


def _job_values(s: JobSnapshot, now: float) -> dict[str, float | None]:
    def age(at: float | None) -> float | None:
        return max(0.0, now - at) if at is not None else None

    job = s.job or JobMetrics()
    storage = s.storage
    return {
        "job_last_committed_batch_id": s.last_batch_id,
        "job_last_committed_batch_age_seconds": age(s.last_checkpoint_at),
        "job_batch_duration_seconds": job.batch_duration_ms / 1000.0 if job.batch_duration_ms is not None else None,
        "job_input_rows_per_second": job.input_rows_per_second,
        "job_processed_rows_per_second": job.processed_rows_per_second,
        "job_watermark_lag_seconds": age(s.watermark),
        "job_state_rows": job.state_rows,
        "job_state_memory_bytes": job.state_memory_bytes,
        "job_late_rows_dropped_last_batch": job.rows_dropped_by_watermark,
        "job_last_checkpoint_age_seconds": age(s.last_checkpoint_at),
        "job_last_savepoint_age_seconds": age(s.last_savepoint_at),
        "job_restarts": s.total_restarts,
        "job_storage_hygiene_failing": None if storage is None or not storage.passes else float(bool(storage.last_error)),
    }


class JobCollector(Collector):
    """Per-job series and the job counts, from the snapshots the passes left; a deleted job's series go with it."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[str, str], JobSnapshot] = {}
        self._lock = threading.Lock()

    def put(self, namespace: str, job: str, snap: JobSnapshot) -> None:
        with self._lock:
            self._jobs[(namespace, job)] = snap

    def forget(self, namespace: str, job: str) -> None:
        with self._lock:
            self._jobs.pop((namespace, job), None)

    def get(self, namespace: str, job: str) -> JobSnapshot | None:
        with self._lock:
            return self._jobs.get((namespace, job))

    def describe(self) -> Iterable[Metric]:
        return list(self._families({}, 0.0))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            jobs = dict(self._jobs)
        return self._families(jobs, time.time())

    def _families(self, jobs: dict[tuple[str, str], JobSnapshot], now: float) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(f"{PREFIX}_jobs", "StreamJobs by lifecycle state.", labels=["state"])
        counts = {s.value: 0 for s in LifecycleState}
        for snap in jobs.values():
            if snap.state in counts:
                counts[snap.state] += 1
        for state, n in counts.items():
            by_state.add_metric([state], n)
        yield by_state
        by_condition = GaugeMetricFamily(f"{PREFIX}_jobs_by_condition", "StreamJobs by condition type and status.",
                                         labels=["condition", "status"])
        cond_counts: dict[tuple[str, str], int] = {}
        for snap in jobs.values():
            for pair in snap.conditions:
                cond_counts[pair] = cond_counts.get(pair, 0) + 1
        for (ctype, cstatus), n in sorted(cond_counts.items()):
            by_condition.add_metric([ctype, cstatus], n)
        yield by_condition
        info = GaugeMetricFamily(f"{PREFIX}_job_state", "1 for the job's current lifecycle state.", labels=["namespace", "streamjob", "state"])
        for (ns, name), snap in sorted(jobs.items()):
            if snap.state is not None:
                info.add_metric([ns, name, snap.state], 1)
        yield info
        for metric, help_text, read in _JOB_COUNTERS:
            counter = CounterMetricFamily(f"{PREFIX}_{metric}", help_text, labels=["namespace", "streamjob"])
            for (ns, name), snap in sorted(jobs.items()):
                count = read(snap)
                if count is not None:
                    counter.add_metric([ns, name], float(count))
            yield counter
        values = {key: _job_values(snap, now) for key, snap in sorted(jobs.items())}
        for metric, help_text in _JOB_GAUGES:
            family = GaugeMetricFamily(f"{PREFIX}_{metric}", help_text, labels=["namespace", "streamjob"])
            for (ns, name), vals in values.items():
                value = vals[metric]
                if value is not None:
                    family.add_metric([ns, name], float(value))
            yield family


JOBS = JobCollector()
REGISTRY.register(JOBS)

_failures_seen: dict[tuple[str, str], float] = {}
_failures_guard = threading.Lock()


def record_pass(namespace: str, job: str, before: StreamJobStatus, after: StreamJobStatus,
                events: Iterable[Event], now: datetime) -> None:
    """Counts what one pass decided (from the status before and after it and its events); keeps the job's snapshot."""
    key = (namespace, job)
    at = now.timestamp()
    op = before.operation
    started = _epoch(op.started_at) if op is not None else None
    restarts = after.total_restarts - before.total_restarts
    if restarts > 0:
        RESTARTS.inc(restarts)
        with _failures_guard:
            _failures_seen.setdefault(key, at)
    for event in events:
        if event.reason in ("SavepointCompleted", "SavepointFailed"):
            trigger = (op.trigger or op.kind) if op is not None else "unknown"
            SAVEPOINTS.labels(trigger, "completed" if event.reason == "SavepointCompleted" else "failed").inc()
            if started is not None:
                SAVEPOINT_DURATION.labels(trigger).observe(max(0.0, at - started))
            saved = after.last_savepoint
            if event.reason == "SavepointCompleted" and saved is not None and saved.size_bytes is not None:
                SAVEPOINT_SIZE.labels(trigger).observe(saved.size_bytes)
        elif event.reason == "UpgradeCompleted":
            UPGRADES.inc()
            if started is not None:
                UPGRADE_DURATION.observe(max(0.0, at - started))
        elif event.reason == "RolledBack":
            ROLLBACKS.inc()
            if started is not None:
                ROLLBACK_DURATION.observe(max(0.0, at - started))
        elif event.reason == "DriverCreated":
            with _failures_guard:
                seen = _failures_seen.pop(key, None)
            if seen is not None:
                FAILURE_REACTION.observe(max(0.0, at - seen))
    JOBS.put(namespace, job, snapshot(after))


def forget_job(namespace: str, job: str) -> None:
    """The job is gone: its series go too (bounded cardinality over the operator's life)."""
    JOBS.forget(namespace, job)
    with _failures_guard:
        _failures_seen.pop((namespace, job), None)


class _MetricsHandler(BoundedHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send(404, b"not found: the metrics are on /metrics\n", "text/plain; charset=utf-8")
            return
        encode, content_type = choose_encoder(self.headers.get("Accept", ""))
        self.send(200, encode(REGISTRY), content_type)

    def log_message(self, *_: object) -> None:  # scraped every few seconds: not worth a log line each
        pass


def serve(address: str) -> BoundedHTTPServer:
    """Serves /metrics on HOST:PORT in a daemon thread, with the health endpoints' bounds
    (streamjob_contract.httpserve: a deadline per request, a bounded number of connections)."""
    host, _, port = address.rpartition(":")
    if not host:
        raise ValueError(f"--metrics-address={address}: must be HOST:PORT, e.g. 127.0.0.1:9090 or $(POD_IP):9090")
    server = BoundedHTTPServer((host.strip("[]"), int(port)), _MetricsHandler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def reference() -> list[tuple[str, str, str, str]]:
    """(name, type, labels, help) of every metric this module exports; docs/observability.md lists them (a test checks)."""
    example = JobCollector()
    from streamjob_operator.api.status import Condition

    example.put("ns", "job", snapshot(StreamJobStatus(  # label names only: values do not matter
        state=LifecycleState.running, conditions=[Condition(type="Ready", status="True", reason="JobReady")])))
    families = {f.name: f for f in REGISTRY.collect() if f.name not in {g.name for g in example.describe()}}
    families.update({f.name: f for f in example._families(example._jobs, 0.0)})
    rows = []
    for name, family in sorted(families.items()):
        labels = sorted({k for s in family.samples for k in s.labels if k != "le"})
        if family.name.startswith(f"{PREFIX}_job_") and not labels:  # absent until the driver reports it
            labels = ["namespace", "streamjob"]
        exposed = f"{name}_total" if family.type == "counter" else name
        rows.append((exposed, family.type, ", ".join(labels), family.documentation))
    return rows


def reference_markdown() -> str:
    lines = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| `{n}` | {t} | {lbl or '—'} | {h} |" for n, t, lbl, h in reference()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m streamjob_operator.metrics: the reference table for docs/observability.md
    print(reference_markdown(), end="")
