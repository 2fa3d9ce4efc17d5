"""Start the Python workers of the executors' Kafka tasks while the driver starts (`producers: executors`).

Called by job_runtime.kafka.sink_tasks.ExecutorsKafkaWriter.start. Batch 0 of a job whose
executors produce paid for pyspark's daemon and a Python worker per task slot, each loading
librdkafka and Arrow, inside its first Kafka transactions: measured on two cores, 1.8 s of
an 8.8 s batch 0, against 4.4 s for each later batch of the same 1.2 M records. Those
workers do not depend on the batch: a small Spark job with one task per task slot, run in a
thread of its own while the driver initialises its transactional producers and Spark plans
batch 0 (mostly waiting on the broker), starts them, and pyspark keeps an idle worker for
the next task (`spark.python.worker.reuse`, on by default; an idle worker lives a minute).
docs/benchmarks/kafka-backlog-5m.md has the effect on a whole backlog.

Best effort: the job sends nothing and holds no state; its failure (Spark stopping first, a
worker that cannot start) is logged and changes nothing: batch 0 starts its workers itself,
as it did before.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from job_runtime.kafka.task_publish import WARM_SCHEMA, warm_worker

log = logging.getLogger("job_runtime.kafka_sink")

DESCRIPTION = "streamjob: start the Python workers of the Kafka tasks"


def warm(spark: Any) -> list[int]:
    """Run the warm-up job (one task per task slot) and return the process ids of the workers it ran on."""
    slots = max(1, int(spark.sparkContext.defaultParallelism))
    spark.sparkContext.setLocalProperty("spark.job.description", DESCRIPTION)  # this thread's jobs only
    try:
        return [row["pid"] for row in spark.range(0, slots, 1, slots).mapInArrow(warm_worker, WARM_SCHEMA).collect()]
    finally:
        spark.sparkContext.setLocalProperty("spark.job.description", None)


def warm_workers(spark: Any) -> threading.Thread:
    """Run `warm` in a daemon thread (returned, started); the caller does not wait for it."""
    thread = threading.Thread(target=_run, args=(spark,), name="streamjob-warm-workers", daemon=True)
    thread.start()
    return thread


def _run(spark: Any) -> None:
    started = time.monotonic()
    try:
        workers = warm(spark)
    except Exception as err:  # Spark stopped first, or a worker could not start: batch 0 starts its own
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else type(err).__name__
        log.info("did not start the tasks' Python workers ahead of batch 0 reason=%s", reason)
        return
    log.info("started the tasks' Python workers ahead of batch 0 workers=%d seconds=%.1f", len(set(workers)), time.monotonic() - started)
