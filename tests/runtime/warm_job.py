"""Run as a child process by tests/runtime/test_warm_workers.py: the warm-up job of the executors'
Kafka sink (job_runtime.kafka.warm), then a `mapInArrow` job shaped as a batch's publishing tasks
(one task per task slot), in a `local[2]` session of its own (its own JVM and pyspark daemon).

Prints one JSON line: the worker process ids of the warm-up job and of the job after it.
"""

import json
import os
import sys
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from job_runtime.kafka.warm import warm

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")


def pid(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"pid": pa.array([os.getpid()], pa.int32()), "rows": pa.array([rows], pa.int64())})


warmed = warm(spark)
after = [r["pid"] for r in spark.range(0, 100_000, 1, 2).mapInArrow(pid, "pid int, rows long").collect()]
spark.stop()
print(json.dumps({"warmed": warmed, "after": after, "daemon": os.getpid()}), file=sys.stdout, flush=True)
