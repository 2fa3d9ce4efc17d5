"""The pure parts of observe: pod status -> DriverPod, runtime status -> JobProgress."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RuntimeStatus
from streamjob_operator.api.status import MAX_MESSAGE, JobMetrics, StorageHygiene
from streamjob_operator.reconcile.model import PodPhase
from streamjob_operator.reconcile.observe import driver_pod, job_progress, termination_message


def pod(phase: str, terminated: dict | None = None, deleting: bool = False) -> dict:
    state = {"terminated": terminated} if terminated else {"running": {}}
    meta = {"name": "wc-driver-2", "labels": {"streamjob.io/driver-epoch": "2"}}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": [{"name": "driver", "state": state}]}}


@pytest.mark.parametrize(
    ("body", "phase", "kind", "message"),
    [
        pytest.param(pod("Running"), PodPhase.running, None, "", id="a running driver has no exit"),
        pytest.param(pod("Failed", {"exitCode": 10, "message": json.dumps({"message": "savepoint s3://x written"})}),
                     PodPhase.failed, ExitCode.STOPPED_FOR_SAVEPOINT, "savepoint s3://x written",
                     id="exit 10 is a stop for a savepoint, with the runtime's JSON message"),
        pytest.param(pod("Failed", {"exitCode": 11}), PodPhase.failed, ExitCode.STOPPED_BY_REQUEST, "", id="exit 11 is a requested stop"),
        pytest.param(pod("Failed", {"exitCode": 12, "message": "{\"message\": \"job.pipeline: bad\"}"}), PodPhase.failed,
                     ExitCode.INVALID_JOB, "job.pipeline: bad", id="exit 12 is an invalid job"),
        pytest.param(pod("Failed", {"exitCode": 1, "message": "Exception in thread main: java.lang.OutOfMemoryError\n\tat x.y(z)"}),
                     PodPhase.failed, ExitCode.FAILED, "Exception in thread main: java.lang.OutOfMemoryError",
                     id="a JVM stack trace is reduced to its headline"),
        pytest.param(pod("Running", {"exitCode": 0}), PodPhase.succeeded, ExitCode.FINISHED, "",
                     id="a terminated container counts even before the pod phase catches up"),
    ],
)
def test_driver_pod(body: dict, phase: PodPhase, kind: ExitCode | None, message: str) -> None:
    d = driver_pod(body)
    assert (d.phase, d.exit_kind, d.message, d.epoch) == (phase, kind, message, 2)


def test_a_killed_driver_says_it_was_killed() -> None:
    d = driver_pod(pod("Failed", {"exitCode": 137, "reason": "Error", "message": "INFO all fine"}))
    assert d.exit_kind is ExitCode.FAILED and d.message.startswith("killed by signal 9")


def test_deleting_pods_are_not_alive() -> None:
    assert not driver_pod(pod("Running", deleting=True)).alive


def test_readiness_needs_a_batch_in_this_run() -> None:
    assert not job_progress({"state": "RUNNING", "lastBatchId": None}).ready
    assert job_progress({"state": "RUNNING", "lastBatchId": 0, "latestCompletedBatch": 7}).ready
    assert not job_progress({"state": "SAVEPOINTING", "lastBatchId": 3}).ready
    assert not job_progress({"state": "RUNNING", "lastBatchId": 3, "lastError": "boom"}).ready


def test_a_body_that_is_not_a_status_reads_as_unreachable() -> None:
    assert not job_progress({"state": "RUNNING", "lastBatchId": "not a number"}).reachable
    assert job_progress({"state": "A_NEWER_STATE", "somethingNew": 1}).reachable  # a newer runtime's body still reads


def test_every_field_status_shows_of_the_driver_comes_from_the_contract() -> None:
    """status.job (JobMetrics) is declared once more only to be shown: each of its fields is the runtime's,
    copied by name, so a field added to JobMetrics without its RuntimeStatus twin fails here."""
    shown = set(JobMetrics.model_fields) - {"storage", "observed_at"}
    numbers = iter(range(1, 100))
    body: dict[str, object] = {}
    for name in shown:
        annotation = str(RuntimeStatus.model_fields[name].annotation) if name in RuntimeStatus.model_fields else ""
        body[name] = f"v-{name}" if "str" in annotation else next(numbers)
    storage = {name: (f"v-{name}" if name.endswith(("_at", "_error")) else next(numbers)) for name in StorageHygiene.model_fields}
    runtime = RuntimeStatus.model_validate({**body, "storage": storage})
    metrics = JobMetrics.of(runtime, observed_at="2026-01-02T00:00:00Z")
    assert {name: getattr(metrics, name) for name in shown} == body
    assert metrics.storage is not None and metrics.storage.model_dump() == storage
    assert metrics.observed_at == "2026-01-02T00:00:00Z"


def test_a_long_storage_error_is_clipped_to_fit_status() -> None:
    runtime = RuntimeStatus.model_validate({"storage": {"passes": 1, "lastError": "x" * 5000}})
    metrics = JobMetrics.of(runtime, observed_at="2026-01-02T00:00:00Z")
    assert metrics.storage is not None and metrics.storage.last_error is not None
    assert len(metrics.storage.last_error) == MAX_MESSAGE and metrics.storage.last_error.endswith("...")


def test_a_plain_log_tail_keeps_its_last_lines() -> None:
    assert termination_message("a\nb\nc\nd\ne\nf\ng") == "c\nd\ne\nf\ng"


class FakeClients:
    """The Clients seam observe reads through: one running driver pod whose /status does not answer, local storage."""

    def __init__(self, pods: list[dict]) -> None:
        self.pods = pods

    def driver_pods(self, namespace: str, job: str) -> list[dict]:
        return self.pods

    def driver_call(self, *_: object, **__: object) -> object:
        from streamjob_operator.k8s.clients import DriverUnreachable

        raise DriverUnreachable("GET /status: timed out")

    def s3_config(self, namespace: str, spec: object) -> object:
        from streamjob_contract.s3 import S3Config

        return S3Config()

    def s3_call(self, config: object, call: Callable[[], object]) -> object:
        return call()


@pytest.mark.parametrize("phase", ["AwaitingReady", "Deploying"])
def test_an_unanswering_upgraded_driver_awaiting_readiness_has_its_checkpoint_read(phase: str, tmp_path: Path) -> None:
    """decide.lineage needs the batch an upgraded driver committed even when its /status does not answer."""
    from datetime import datetime, timezone

    from streamjob_operator.api.spec import parse_spec
    from streamjob_operator.api.status import Operation, StreamJobStatus
    from streamjob_operator.reconcile.observe import observe

    checkpoint = tmp_path / "run-2"
    (checkpoint / "commits").mkdir(parents=True)
    for batch in (42, 49, 50):
        (checkpoint / "commits" / str(batch)).write_text("v1\n{}\n")
    running = pod("Running")
    running["status"]["podIP"] = "10.0.0.9"
    spec = parse_spec({"image": "i:1", "job": {"entrypoint": "m:f"}, "checkpoint": {"location": tmp_path.as_uri()}})
    status = StreamJobStatus(driver_pod="wc-driver-2", driver_epoch=2, checkpoint_location=checkpoint.as_uri(),
                             operation=Operation(kind="upgrade", phase=phase, savepoint_path="s3://b/sp", restore_mode="savepoint"))
    body = {"metadata": {"name": "wc", "namespace": "ns", "uid": "u", "generation": 2}}
    seen = observe(FakeClients([running]), body, spec, status, datetime.now(timezone.utc), True)  # type: ignore[arg-type]
    assert seen.job is not None and not seen.job.reachable
    # awaiting readiness: the checkpoint says what /status could not; while deploying, nothing is compared yet
    assert seen.checkpoint_batch == (50 if phase == "AwaitingReady" else None)


def test_a_driver_evicted_by_the_node_controller_is_told_from_one_deleted_by_a_user() -> None:
    """The taint eviction's condition as the API server records it (DisruptionTarget, DeletionByTaintManager)."""
    base = {"metadata": {"name": "d", "deletionTimestamp": "2025-03-01T12:00:30Z"}, "status": {"phase": "Running"}}
    evicted = {**base, "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
         "message": "Taint manager: deleting due to NoExecute taint"}]}}
    preempted = {**base, "status": {"phase": "Running", "conditions": [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}}
    assert driver_pod(evicted).evicted_from_lost_node and driver_pod(evicted).deleting
    assert not driver_pod(preempted).evicted_from_lost_node
    assert not driver_pod(base).evicted_from_lost_node


def test_the_first_unanswered_poll_is_remembered_until_the_driver_answers() -> None:
    """observe.remember_answer: the count of a driver's silence starts at the operator's first unanswered poll."""
    from datetime import datetime, timedelta, timezone

    from streamjob_contract.runtime_status import RuntimeStatus
    from streamjob_operator.reconcile import observe as observing
    from streamjob_operator.reconcile.model import JobProgress

    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    later = t0 + timedelta(seconds=20)
    first = observing.remember_answer("ns", "job", "job-driver-1", JobProgress(), t0)
    again = observing.remember_answer("ns", "job", "job-driver-1", JobProgress(), later)
    assert (first.unanswered_since, again.unanswered_since) == (t0, t0)
    other_pod = observing.remember_answer("ns", "job", "job-driver-2", JobProgress(), later)
    assert other_pod.unanswered_since == later  # a new driver's silence is its own
    answer = JobProgress(RuntimeStatus.model_validate({"state": "RUNNING"}))
    assert observing.remember_answer("ns", "job", "job-driver-2", answer, later) == answer
    after = observing.remember_answer("ns", "job", "job-driver-2", JobProgress(), later + timedelta(seconds=5))
    assert after.unanswered_since == later + timedelta(seconds=5)  # an answer cleared it
    observing._UNANSWERED.clear()
