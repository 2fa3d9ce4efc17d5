"""The poll and progress-write budgets (progress.Progress): what a Ready job's poll writes, and when.

At 1,000 jobs every poll wrote the driver's progress to status: 100 status writes a second
if the operator kept up (docs/benchmarks/operator-scale.md). The decisions here come from
the real ``decide``, as the glue runs it: a Ready job, then a poll that finds a new batch.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from test_idle_gate import spec

from streamjob_contract.runtime_status import RunState, RuntimeStatus
from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.progress import Progress, interval, progress_only
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import Decision, DriverPod, JobProgress, Observations, PodPhase

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
KEY = ("ns", "wc")


def batch(n: int) -> JobProgress:
    return JobProgress(RuntimeStatus(state=RunState.RUNNING, last_batch_id=n, latest_completed_batch=n))


def seen(pod: DriverPod | None, job: JobProgress | None = None) -> Observations:
    return Observations(name="wc", namespace="ns", uid="1234abcd-0000", generation=1,
                        drivers=(pod,) if pod else (), job=job)


def ready_job() -> tuple[StreamJobStatus, DriverPod]:
    """The stored status of a Ready job whose driver last answered batch 3 at T0."""
    status = decide(spec(), StreamJobStatus(), seen(None), T0).status
    pod = DriverPod(name=str(status.driver_pod), phase=PodPhase.running, ip="127.0.0.2")
    for _ in range(4):
        status = decide(spec(), status, seen(pod, batch(3)), T0).status
    assert status.ready and status.last_checkpoint is not None and status.last_checkpoint.batch_id == 3
    return status, pod


def poll(status: StreamJobStatus, pod: DriverPod, n: int, after: float, s: StreamJobSpec | None = None) -> Decision:
    return decide(s or spec(), status, seen(pod, batch(n)), T0 + timedelta(seconds=after))


@pytest.mark.parametrize(("jobs", "per_second", "seconds"), [
    (1, 20.0, 10.0), (200, 20.0, 10.0), (1000, 20.0, 50.0), (1000, 10.0, 100.0), (5000, 20.0, 250.0),
])
def test_the_interval_is_10s_until_the_budget_is_spent_then_grows_with_the_jobs(jobs: int, per_second: float,
                                                                               seconds: float) -> None:
    assert interval(jobs, per_second) == seconds


def test_a_poll_that_only_moves_progress_is_not_written_until_the_interval_is_over() -> None:
    stored, pod = ready_job()
    budget = Progress(writes_per_second=10.0)
    for i in range(1000):
        budget.saw(("ns", f"job-{i}"))  # 1,000 jobs: progress written every 100 s
    assert budget.progress_seconds() == 100.0
    early = poll(stored, pod, 7, after=50)
    assert progress_only(stored, early.status) and early.status != stored
    assert budget.defer(KEY, stored, early, T0 + timedelta(seconds=50))
    # the next pass decides over the stored status with the newer progress laid over it
    shown = budget.overlay(KEY, stored)
    assert shown.last_checkpoint is not None and shown.last_checkpoint.batch_id == 7
    assert shown.job == early.status.job and shown.state == stored.state
    late = poll(shown, pod, 9, after=100)
    assert not budget.defer(KEY, stored, late, T0 + timedelta(seconds=100))  # stored progress is 100 s old: written
    budget.written(KEY)
    assert budget.overlay(KEY, stored) == stored


def test_at_a_few_jobs_every_poll_is_written_as_before() -> None:
    stored, pod = ready_job()
    budget = Progress()
    decision = poll(stored, pod, 5, after=10)  # the next steady poll, 10 s later
    assert not budget.defer(KEY, stored, decision, T0 + timedelta(seconds=10))


def test_anything_but_progress_is_written_at_once() -> None:
    stored, pod = ready_job()
    budget = Progress(writes_per_second=0.001)  # progress alone would wait for hours
    changed = poll(stored, pod, 5, after=1, s=spec(image="ghcr.io/streamjob/streamjob-runtime:0.1.1"))
    assert changed.status.operation is not None  # the upgrade starts: written before it is acted on
    assert not budget.defer(KEY, stored, changed, T0 + timedelta(seconds=1))
    failed = decide(spec(), stored, seen(pod, JobProgress(RuntimeStatus(state=RunState.FAILED, last_batch_id=5,
                                                                        latest_completed_batch=5))), T0)
    assert not budget.defer(KEY, stored, failed, T0)


def test_unwritten_progress_is_dropped_when_the_stored_status_moved_on() -> None:
    stored, pod = ready_job()
    budget = Progress(writes_per_second=0.001)
    assert budget.defer(KEY, stored, poll(stored, pod, 7, after=1), T0 + timedelta(seconds=1))
    replaced = stored.model_copy(update={"driver_pod": "wc-driver-2"})  # another driver since: its progress is not ours
    assert budget.overlay(KEY, replaced) == replaced
    assert budget.overlay(KEY, stored) == stored  # dropped for good


def test_a_deleted_job_leaves_the_count_and_its_unwritten_progress() -> None:
    stored, pod = ready_job()
    budget = Progress(polls_per_second=0.1)
    budget.saw(KEY)
    budget.saw(("ns", "other"))
    assert budget.poll_seconds() == 20.0
    assert budget.defer(KEY, stored, poll(stored, pod, 7, after=1), T0 + timedelta(seconds=1))
    budget.forget(KEY)
    assert budget.poll_seconds() == 10.0 and budget.overlay(KEY, stored) == stored


def test_budgets_must_be_positive() -> None:
    with pytest.raises(ValueError, match="budgets must be > 0"):
        Progress(polls_per_second=0)
