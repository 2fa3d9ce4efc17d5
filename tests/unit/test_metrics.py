"""streamjob_operator.metrics: what one pass's status and events turn into, read back from the exposition."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streamjob_operator import metrics
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import (
    CheckpointInfo,
    Condition,
    JobMetrics,
    Operation,
    SavepointInfo,
    StorageHygiene,
    StreamJobStatus,
)
from streamjob_operator.reconcile.model import Event

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def t(seconds_before: float) -> str:
    return (NOW - timedelta(seconds=seconds_before)).isoformat()


def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(metrics.REGISTRY).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(name: str, **labels: str) -> float | None:
    return samples().get((name, tuple(sorted(labels.items()))))


def running(**update: object) -> StreamJobStatus:
    base = StreamJobStatus(
        state=LifecycleState.running, ready=True,
        conditions=[Condition(type="Ready", status="True", reason="JobReady")],
        last_checkpoint=CheckpointInfo(batch_id=41, time=t(5)),
        last_savepoint=SavepointInfo(path="s3://b/sp-1", batch_id=40, time=t(120), trigger="manual"),
        job=JobMetrics(watermark=t(30), input_rows_per_second=5.0, processed_rows_per_second=9.5, state_rows=12,
                       state_memory_bytes=4096, rows_dropped_by_watermark=3, late_rows_dropped_total=17, batch_duration_ms=250,
                       observed_at=t(1)),
    )
    return base.model_copy(update=update)


@pytest.fixture(autouse=True)
def fresh_job():
    yield
    metrics.forget_job("ns", "j")


def test_a_running_job_exports_its_streaming_metrics_labelled_by_namespace_and_job_only() -> None:
    metrics.record_pass("ns", "j", running(), running(), [], NOW)
    job = {"namespace": "ns", "streamjob": "j"}
    assert value("streamjob_job_last_committed_batch_id", **job) == 41
    assert value("streamjob_job_batch_duration_seconds", **job) == 0.25
    assert value("streamjob_job_input_rows_per_second", **job) == 5.0
    assert value("streamjob_job_processed_rows_per_second", **job) == 9.5
    assert value("streamjob_job_state_rows", **job) == 12
    assert value("streamjob_job_state_memory_bytes", **job) == 4096
    assert value("streamjob_job_late_rows_dropped_last_batch", **job) == 3
    assert value("streamjob_job_late_rows_dropped_total", **job) == 17
    assert value("streamjob_job_state", state="Running", **job) == 1
    assert value("streamjob_jobs", state="Running") == 1
    assert value("streamjob_jobs_by_condition", condition="Ready", status="True") == 1
    # ages are computed at scrape time (now > NOW): at least what the pass saw
    assert value("streamjob_job_watermark_lag_seconds", **job) >= 30
    assert value("streamjob_job_last_savepoint_age_seconds", **job) >= 120
    assert value("streamjob_job_last_checkpoint_age_seconds", **job) >= 5
    per_job = {labels for (name, labels) in samples() if name.startswith("streamjob_job_")}
    assert per_job <= {(("namespace", "ns"), ("streamjob", "j")), (("namespace", "ns"), ("state", "Running"), ("streamjob", "j"))}


@pytest.mark.parametrize(
    ("job", "absent"),
    [
        pytest.param(None, "streamjob_job_watermark_lag_seconds", id="no-progress-yet"),
        pytest.param(JobMetrics(watermark="1970-01-01T00:00:00.000Z"), "streamjob_job_watermark_lag_seconds", id="no-watermark-yet"),
        pytest.param(JobMetrics(), "streamjob_job_batch_duration_seconds", id="no-batch-yet"),
    ],
)
def test_what_the_driver_did_not_report_is_absent_not_zero(job: JobMetrics | None, absent: str) -> None:
    status = running(job=job)
    metrics.record_pass("ns", "j", status, status, [], NOW)
    assert value(absent, namespace="ns", streamjob="j") is None
    assert value("streamjob_job_last_committed_batch_id", namespace="ns", streamjob="j") == 41


@pytest.mark.parametrize(
    ("storage", "run_dirs", "savepoint_dirs", "failing"),
    [
        pytest.param(None, None, None, None, id="older-runtime-reports-nothing"),
        pytest.param(StorageHygiene(), 0, 0, None, id="no-pass-yet"),
        pytest.param(StorageHygiene(passes=3, pruned_run_dirs=2, pruned_savepoint_dirs=1), 2, 1, 0, id="pruned"),
        pytest.param(StorageHygiene(passes=4, pruned_run_dirs=2, last_error="run-3: AccessDenied"), 2, 0, 1, id="failing"),
    ],
)
def test_storage_hygiene_is_exported_per_job(storage: StorageHygiene | None, run_dirs: int | None,
                                             savepoint_dirs: int | None, failing: int | None) -> None:
    status = running(job=JobMetrics(storage=storage))
    metrics.record_pass("ns", "j", status, status, [], NOW)
    job = {"namespace": "ns", "streamjob": "j"}
    assert value("streamjob_job_storage_pruned_run_dirs_total", **job) == run_dirs
    assert value("streamjob_job_storage_pruned_savepoint_dirs_total", **job) == savepoint_dirs
    assert value("streamjob_job_storage_hygiene_failing", **job) == failing


def test_a_deleted_job_leaves_no_series() -> None:
    metrics.record_pass("ns", "j", running(), running(), [], NOW)
    metrics.forget_job("ns", "j")
    assert not [k for k in samples() if ("streamjob", "j") in k[1]]
    assert value("streamjob_jobs", state="Running") == 0


def test_a_completed_savepoint_is_counted_by_trigger_with_its_duration() -> None:
    before = running(operation=Operation(kind="savepoint", phase="Savepointing", trigger="periodic", started_at=t(7)))
    completed = value("streamjob_savepoints_total", trigger="periodic", outcome="completed")
    count = value("streamjob_savepoint_duration_seconds_count", trigger="periodic")
    metrics.record_pass("ns", "j", before, running(), [Event("Normal", "SavepointCompleted", "done")], NOW)
    assert value("streamjob_savepoints_total", trigger="periodic", outcome="completed") == completed + 1
    assert value("streamjob_savepoint_duration_seconds_count", trigger="periodic") == count + 1
    assert value("streamjob_savepoint_duration_seconds_bucket", trigger="periodic", le="10.0") >= 1


def test_a_completed_savepoint_size_comes_from_its_manifest_in_status() -> None:
    before = running(operation=Operation(kind="savepoint", phase="Savepointing", trigger="manual", started_at=t(3)))
    after = running(last_savepoint=SavepointInfo(path="s3a://b/sp", batch_id=4, time=NOW.isoformat(), trigger="manual",
                                                 size_bytes=200_000))
    count = value("streamjob_savepoint_size_bytes_count", trigger="manual")
    total = value("streamjob_savepoint_size_bytes_sum", trigger="manual")
    metrics.record_pass("ns", "j", before, after, [Event("Normal", "SavepointCompleted", "done")], NOW)
    assert value("streamjob_savepoint_size_bytes_count", trigger="manual") == count + 1
    assert value("streamjob_savepoint_size_bytes_sum", trigger="manual") == total + 200_000
    assert value("streamjob_savepoint_size_bytes_bucket", trigger="manual", le="+Inf") >= 1


def test_upgrade_and_rollback_are_counted_with_durations() -> None:
    op = Operation(kind="upgrade", phase="AwaitingReady", started_at=t(40))
    upgrades, rollbacks = value("streamjob_upgrades_total"), value("streamjob_rollbacks_total")
    metrics.record_pass("ns", "j", running(operation=op), running(), [Event("Normal", "UpgradeCompleted", "ok")], NOW)
    metrics.record_pass("ns", "j", running(operation=op), running(), [Event("Normal", "RolledBack", "back")], NOW)
    assert value("streamjob_upgrades_total") == upgrades + 1
    assert value("streamjob_rollbacks_total") == rollbacks + 1
    assert value("streamjob_upgrade_duration_seconds_bucket", le="60.0") >= 1


def test_a_failure_counts_a_restart_and_times_the_reaction_until_the_replacement_is_created() -> None:
    restarts = value("streamjob_restarts_total")
    reactions = value("streamjob_failure_reaction_seconds_count")
    failed = running(state=LifecycleState.restarting, total_restarts=1)
    metrics.record_pass("ns", "j", running(), failed, [], NOW)
    metrics.record_pass("ns", "j", failed, failed, [], NOW + timedelta(seconds=1))
    assert value("streamjob_failure_reaction_seconds_count") == reactions  # not replaced yet
    metrics.record_pass("ns", "j", failed, failed, [Event("Normal", "DriverCreated", "x")], NOW + timedelta(seconds=3))
    assert value("streamjob_restarts_total") == restarts + 1
    assert value("streamjob_failure_reaction_seconds_count") == reactions + 1
    assert value("streamjob_failure_reaction_seconds_sum") >= 3
    assert value("streamjob_job_restarts", namespace="ns", streamjob="j") == 1


def test_bounded_labels_are_exported_at_zero_before_the_first_event() -> None:
    assert value("streamjob_reconcile_errors_total", outcome="error") is not None
    assert value("streamjob_savepoints_total", trigger="upgrade", outcome="failed") is not None
