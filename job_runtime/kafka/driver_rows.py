"""A batch's rows on the driver, partition after partition, the next one fetched while one is sent, with
nothing kept once it is sent.

Called by job_runtime.kafka.sink (the driver mode produces every record of a batch itself).

Why not `DataFrame.toLocalIterator`: in Spark 4 the DAG scheduler files each job under the
SQL execution named by the `spark.sql.execution.id` property of the thread that submits
it (`DAGScheduler.activeQueryToJobs`), and lets a finished job, with the partition it
returned, go only when that execution ends. `toLocalIterator` creates its serving thread
inside an execution of its own that ends as soon as the thread is started; the thread
inherits the id and submits one job per partition under it, after it ended: nothing
ever lets them go. Each batch published that way stayed on the driver's heap (about
100 MB a batch of 300,000 records), and the 10th batch of a 3 M backlog failed with
`java.lang.OutOfMemoryError: Java heap space` (a heap dump: the partitions' pickled rows
held by `ActiveJob` -> `JobWaiter` -> the result handler, from `activeQueryToJobs`).

Here the serving thread (Spark's `PythonRDD.toLocalIteratorAndServe`, the server `toLocalIterator`
uses, on the batch's Arrow RDD) is created by the calling thread with the property cleared and
put back after it: the thread inherits no execution id, its jobs, one a partition, are filed
under none, and a partition is freed once it has been read from the socket. It runs the job of
partition i+1 while partition i is sent (its prefetch), so the driver holds at most two
partitions, and reading the next one overlaps with producing this one: on the 5 M backlog the
driver mode went from 0.76x Spark's writer's throughput to 0.85x, its peak memory from 1.37x to
1.55x (docs/benchmarks/kafka-backlog-5m-default.md). The jobs carry a tag of the read: a reader
that stops early (the publish failed) cancels the partition fetched ahead.

The partition comes as Arrow record batches (`Dataset.toArrowBatchRdd`, batches of
`spark.sql.execution.arrow.maxRecordsPerBatch` rows, the same conversion `mapInArrow` hands
the executors' tasks), not as pickled Rows (`javaToPython`, what `toLocalIterator` and
`DataFrame.rdd` read): a Row object a record, and a lookup by name for each of its fields, cost
the driver 4.5 us a record; the Arrow batches, columns made Python lists at once, 0.9 us
(500,000 records of 100 bytes, alternated in one session, 2026-11-29).
"""

from __future__ import annotations

import uuid
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from job_runtime.kafka.send import Row, batch_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EXECUTION_ID = "spark.sql.execution.id"  # SparkContext.SQL_EXECUTION_ID_KEY
JOB_TAG = "streamjob-driver-rows"  # the jobs of one read: cancelled when its reader stops early


def rows_by_partition(df: "DataFrame", topic: str) -> Generator[Row, None, None]:
    """(topic, key, value, headers) of every record of `df` (job_runtime.kafka.sink.records' shape),
    partition after partition, in partition order; `topic` for every record when `df` has no topic column.
    The next partition's job runs while this one is read (at most two partitions on the driver); a reader
    that stops early (closes the generator) cancels it."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.util import _local_iterator_from_socket

    spark = df.sparkSession
    sc = spark.sparkContext
    jvm: Any = sc._jvm
    per_batch = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") or 10_000)
    zone = spark.conf.get("spark.sql.session.timeZone")
    # The JVM's batches carry no schema: both sides are told the same types here (no large variable-width
    # types, whatever the session says), so the bytes are read with the schema they were written with.
    schema = to_arrow_schema(df.schema, error_on_duplicated_field_names_in_struct=True, timezone=zone,
                             prefers_large_types=False)
    batches = df._jdf.toArrowBatchRdd(per_batch, zone, True, False)  # one Arrow IPC record batch an element
    tag = f"{JOB_TAG}-{uuid.uuid4().hex[:12]}"
    # the serving thread, and the jobs it submits, inherit the properties the thread has while it is created
    sock_info = run_unfiled(sc, lambda: jvm.PythonRDD.toLocalIteratorAndServe(batches, True), tag)
    done = False
    try:
        for message in _local_iterator_from_socket(sock_info, NoOpSerializer()):
            yield from batch_rows(pa.ipc.read_record_batch(pa.py_buffer(message), schema), topic)
        done = True
    finally:
        if not done:
            sc.cancelJobsWithTag(tag)  # the partition fetched ahead, not to be read now


def run_unfiled(sc: Any, submit: Any, tag: str | None = None) -> Any:
    """`submit()` with the thread's SQL execution id cleared (see the module docstring), and with job tag
    `tag` when given, then put back: what `submit` starts, threads and jobs, is filed under no execution."""
    held = sc.getLocalProperty(EXECUTION_ID)
    sc.setLocalProperty(EXECUTION_ID, None)
    if tag is not None:
        sc.addJobTag(tag)
    try:
        return submit()
    finally:
        if tag is not None:
            sc.removeJobTag(tag)
        sc.setLocalProperty(EXECUTION_ID, held)
