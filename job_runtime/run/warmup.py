"""A warm standby's warm-up: the first-use costs of what runs after its release, paid before it reports STANDBY.

Called by job_runtime.run.standby once the job is checked. After the release the standby restores the
savepoint, claims its checkpoint, takes the epoch and starts the query, and each of those pays for
something used for the first time in the process: botocore's first client (its models loaded, about
0.25 s), the checkpoint's S3A file system and its AWS SDK client (Hadoop 3.4+ builds the SDK client on
its first request, its classes loaded from the SDK's bundle jar) in the query's start, and the first
Spark tasks (the task path, code generation, a shuffle, on the driver and on every executor) in the
first batch. Here they are paid while the old driver still runs.

Nothing here touches the checkpoint, a source or an output. Building a client sends no request. The
Spark job computes from ``spark.range``. The file system is the one of the checkpoint's bucket, and
its one request is a HEAD of the bucket, which names no object. It is warmed for a pipeline job only,
with the Hadoop conf the query's start uses (``sessionState.newHadoopConf()``): Hadoop keeps one file
system per bucket, configured by whoever asks first, and an entrypoint may still set ``fs.s3a.*``
options when it is called, after the release.

Best effort and bounded: a step that fails is logged and skipped (the start after the release pays
for it, as it did before); steps still running after WARMUP_SECONDS, or when the standby is asked to
stop, go on in the background (they write nothing) and the standby does not wait for them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from job_runtime.query.errors import describe
from job_runtime.settings import RuntimeSettings
from streamjob_contract.jobdef import JobDefinition
from streamjob_contract.s3 import S3Config, parse_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("job_runtime.runner")

WARMUP_SECONDS = 30.0  # the standby reports STANDBY after this even when a step has not finished
WAIT_SLICE_SECONDS = 0.2  # how often a stop request is looked for while the steps run
ROWS_PER_TASK = 1024


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[], object]


def plan(spark: "SparkSession", job: JobDefinition, settings: RuntimeSettings, s3: S3Config) -> list[Step]:
    """The steps for this job, in order: what the start after the release will use first (no I/O here)."""
    steps = []
    if _on_s3(settings.checkpoint_location) or _on_s3(settings.savepoint_location):
        steps.append(Step("s3Client", s3.client))  # the restore's savepoint is where the job's savepoints are
    steps.append(Step("tasks", partial(run_tasks, spark)))
    if job.pipeline is not None and _on_s3(settings.checkpoint_location):
        steps.append(Step("filesystem", partial(open_filesystem, spark, settings.checkpoint_location)))
    return steps


def _on_s3(location: str | None) -> bool:
    return location is not None and parse_location(location).scheme == "s3"


def run_tasks(spark: "SparkSession") -> None:
    """One small job with a task per executor core: code generation, the task path and a shuffle, warmed."""
    slices = max(1, int(spark.sparkContext.defaultParallelism))
    spark.range(0, slices * ROWS_PER_TASK, 1, slices).selectExpr("sum(id % 7) AS warm").collect()


def open_filesystem(spark: "SparkSession", checkpoint: str) -> None:
    """The Hadoop file system of the checkpoint's bucket, opened with the query's conf, and its SDK client
    built by one HEAD of the bucket (no object of it named)."""
    jvm: Any = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # what StreamExecution opens the checkpoint with
    bucket = jvm.java.net.URI(f"s3a://{parse_location(checkpoint).bucket}/")
    jvm.org.apache.hadoop.fs.FileSystem.get(bucket, conf).getS3AInternals().getBucketMetadata()


def warm_up(steps: Sequence[Step], *, job: str, stopped: Callable[[], bool],
            seconds: float = WARMUP_SECONDS) -> dict[str, str]:
    """Runs `steps` in order on a thread of their own; each step's outcome ("ok", "failed" or "unfinished"
    when the bound passed or `stopped()` said so first). Never raises."""
    outcomes = {step.name: "unfinished" for step in steps}

    def work() -> None:
        for step in steps:
            try:
                step.run()
                outcomes[step.name] = "ok"
            except Exception as err:  # best effort: the start after the release pays for it
                outcomes[step.name] = "failed"
                log.warning("skipped standby warm-up step job=%s step=%s error=%s", job, step.name, describe(err))

    started = time.monotonic()
    worker = threading.Thread(target=work, name="standby-warmup", daemon=True)
    worker.start()
    while worker.is_alive() and time.monotonic() - started < seconds and not stopped():
        worker.join(WAIT_SLICE_SECONDS)
    done = dict(outcomes)
    log.info("warmed standby job=%s %s seconds=%.1f", job, " ".join(f"{k}={v}" for k, v in done.items()),
             time.monotonic() - started)
    return done
