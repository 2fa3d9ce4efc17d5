"""A warm standby's warm-up (job_runtime.run.warmup, called by job_runtime.run.standby): which first uses are
paid before STANDBY, that none of them names the checkpoint, and that a failing or slow step never keeps the
standby from reporting STANDBY. Fakes stand in for Spark's Python objects and the JVM; no Spark runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from job_runtime.query import start
from job_runtime.run import warmup
from job_runtime.run.runner import Runner
from job_runtime.settings import RuntimeSettings
from streamjob_contract.jobdef import JobDefinition, parse_job_definition
from streamjob_contract.runtime_status import RunState
from streamjob_contract.s3 import S3Config

PIPELINE = parse_job_definition({"pipeline": {"sources": [{"name": "t", "kind": "rate"}], "sink": {"kind": "console"}}})
ENTRYPOINT = parse_job_definition({"entrypoint": "jobs.wordcount:build"})


def settings(checkpoint: str, savepoints: str | None = None) -> RuntimeSettings:
    return RuntimeSettings(job_file=Path("job.json"), name="wc", namespace="ns", checkpoint_location=checkpoint,
                           state_partitions=2, savepoint_location=savepoints, standby=True, token_file=Path("token"))


class Recorder:
    """Records every call made through it, by dotted name, with its arguments; returns another Recorder."""

    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]], name: str = "") -> None:
        self._calls, self._name = calls, name

    def __getattr__(self, attr: str) -> "Recorder":
        return Recorder(self._calls, f"{self._name}.{attr}" if self._name else attr)

    def __call__(self, *args: Any) -> "Recorder":
        self._calls.append((self._name, args))
        return Recorder(self._calls, f"{self._name}()")


class FakeSpark:
    """What the warm-up reaches of a SparkSession: the jobs it runs, the JVM calls it makes."""

    def __init__(self, parallelism: int = 3) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.jobs: list[tuple[tuple[int, ...], str]] = []
        self.sparkContext = type("SC", (), {"defaultParallelism": parallelism, "_jvm": Recorder(self.calls, "jvm")})()
        self._jsparkSession = Recorder(self.calls, "session")

    def range(self, *args: int) -> Any:
        return SimpleNamespace(selectExpr=lambda expr: SimpleNamespace(collect=lambda: self.jobs.append((args, expr))))


@pytest.mark.parametrize(
    ("checkpoint", "savepoints", "job", "steps"),
    [
        pytest.param("s3a://b/ck/run-3", "s3://b/sp", PIPELINE, ["s3Client", "tasks", "filesystem"], id="pipeline on S3"),
        pytest.param("s3a://b/ck/run-3", None, ENTRYPOINT, ["s3Client", "tasks"],
                     id="an entrypoint may set fs.s3a options when it is called: its file system is not opened"),
        pytest.param("file:///ck/run-3", "s3://b/sp", PIPELINE, ["s3Client", "tasks"], id="savepoints on S3, checkpoint on disk"),
        pytest.param("file:///ck/run-3", "file:///sp", PIPELINE, ["tasks"], id="nothing on S3: no client"),
    ],
)
def test_the_steps_follow_what_the_start_after_the_release_uses(
    checkpoint: str, savepoints: str | None, job: JobDefinition, steps: list[str]
) -> None:
    plan = warmup.plan(FakeSpark(), job, settings(checkpoint, savepoints), S3Config())  # type: ignore[arg-type]
    assert [s.name for s in plan] == steps


def test_the_file_system_is_opened_for_the_bucket_with_the_querys_conf_and_no_object_is_named() -> None:
    spark = FakeSpark()
    warmup.open_filesystem(spark, "s3a://bucket/jobs/wc-1234/run-3")  # type: ignore[arg-type]
    assert [name for name, _ in spark.calls] == [
        "session.sessionState",
        "session.sessionState().newHadoopConf",  # the conf StreamExecution opens the checkpoint with
        "jvm.java.net.URI",
        "jvm.org.apache.hadoop.fs.FileSystem.get",
        "jvm.org.apache.hadoop.fs.FileSystem.get().getS3AInternals",
        "jvm.org.apache.hadoop.fs.FileSystem.get().getS3AInternals().getBucketMetadata",  # HEAD of the bucket
    ]
    named = [arg for _, args in spark.calls for arg in args if isinstance(arg, str)]
    assert named == ["s3a://bucket/"], "the warm-up named something in the bucket: " + repr(named)


def test_one_small_job_runs_a_task_per_executor_core() -> None:
    spark = FakeSpark(parallelism=6)
    warmup.run_tasks(spark)  # type: ignore[arg-type]
    assert spark.jobs == [((0, 6 * warmup.ROWS_PER_TASK, 1, 6), "sum(id % 7) AS warm")]


def test_a_failing_step_is_skipped_and_the_next_ones_still_run() -> None:
    ran: list[str] = []

    def fails() -> None:
        raise RuntimeError("S3 said 403")

    outcomes = warmup.warm_up(
        [warmup.Step("s3Client", lambda: ran.append("s3Client")), warmup.Step("filesystem", fails),
         warmup.Step("tasks", lambda: ran.append("tasks"))],
        job="ns/wc", stopped=lambda: False,
    )
    assert outcomes == {"s3Client": "ok", "filesystem": "failed", "tasks": "ok"}
    assert ran == ["s3Client", "tasks"]


@pytest.mark.parametrize(
    ("stopped", "seconds"),
    [
        pytest.param(lambda: True, 60.0, id="a stop request does not wait for the warm-up"),
        pytest.param(lambda: False, 0.0, id="past the bound the standby goes on without it"),
    ],
)
def test_a_step_that_does_not_finish_is_left_behind(stopped: Callable[[], bool], seconds: float) -> None:
    hang = threading.Event()
    try:
        outcomes = warmup.warm_up([warmup.Step("filesystem", hang.wait), warmup.Step("tasks", lambda: None)],
                                  job="ns/wc", stopped=stopped, seconds=seconds)
    finally:
        hang.set()
    assert outcomes == {"filesystem": "unfinished", "tasks": "unfinished"}


class RecordingS3Config(S3Config):
    """Records the runner's state each time a client is asked for."""

    seen: list[RunState] = []
    runner: Runner | None = None

    def client(self) -> Any:
        assert self.runner is not None
        self.seen.append(self.runner.state)
        return object()


def test_the_standby_warms_up_before_it_reports_standby_and_writes_nothing_before_its_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = tmp_path / "run-3"
    spark = FakeSpark()
    monkeypatch.setattr(start, "check_job", lambda _spark, _job, _settings: None)
    config = RecordingS3Config()
    runner = Runner(settings(checkpoint.as_uri(), "s3://b/sp"), PIPELINE, config)
    RecordingS3Config.runner, RecordingS3Config.seen = runner, []
    monkeypatch.setattr(runner, "_build_session", lambda: spark)

    released: list[str | None] = []
    waiting = threading.Thread(target=lambda: released.append(runner._wait_for_release()), daemon=True)
    waiting.start()
    deadline = time.monotonic() + 30
    while runner.state is not RunState.STANDBY and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.state is RunState.STANDBY
    # warmed before STANDBY was reported: the S3 client built and the job run, while the state said STARTING
    assert RecordingS3Config.seen == [RunState.STARTING]
    assert len(spark.jobs) == 1
    assert not checkpoint.exists(), "the standby wrote at its checkpoint before the release"

    assert runner.release("s3://b/sp/upgrade-1")["restoreFrom"] == "s3://b/sp/upgrade-1"
    waiting.join(30)
    assert released == ["s3://b/sp/upgrade-1"]
    assert not checkpoint.exists()
