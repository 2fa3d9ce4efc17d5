"""A batch's rows on the driver, one partition at a time, with nothing kept once it is sent.

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

Here each partition is one job run in the calling thread with the property cleared for
the job's submission and put back after it: the job is filed under no execution, and the
partition it returned is freed once it has been read from the socket.

The partition comes as Arrow record batches (`Dataset.toArrowBatchRdd`, batches of
`spark.sql.execution.arrow.maxRecordsPerBatch` rows, the same conversion `mapInArrow` hands
the executors' tasks), not as pickled Rows (`javaToPython`, what `toLocalIterator` and
`DataFrame.rdd` read): a Row object a record, and a lookup by name for each of its fields, cost
the driver 4.5 us a record; the Arrow batches, columns made Python lists at once, 0.9 us
(500,000 records of 100 bytes, alternated in one session, 2026-11-29).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from job_runtime.kafka.send import Row, batch_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EXECUTION_ID = "spark.sql.execution.id"  # SparkContext.SQL_EXECUTION_ID_KEY


def rows_by_partition(df: "DataFrame", topic: str) -> Iterator[Row]:
    """(topic, key, value, headers) of every record of `df` (job_runtime.kafka.sink.records' shape),
    partition after partition, in partition order; `topic` for every record when `df` has no topic column."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.util import _load_from_socket

    spark = df.sparkSession
    sc = spark.sparkContext
    jvm: Any = sc._jvm
    per_batch = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") or 10_000)
    zone = spark.conf.get("spark.sql.session.timeZone")
    # The JVM's batches carry no schema: both sides are told the same types here (no large variable-width
    # types, whatever the session says), so the bytes are read with the schema they were written with.
    schema = to_arrow_schema(df.schema, error_on_duplicated_field_names_in_struct=True, timezone=zone,
                             prefers_large_types=False)
    batches = df._jdf.toArrowBatchRdd(per_batch, zone, True, False).toJavaRDD()  # one Arrow IPC record batch an element
    for index in range(batches.getNumPartitions()):
        sock_info = run_unfiled(sc, lambda index=index: jvm.PythonRDD.runJob(sc._jsc.sc(), batches, [index]))
        with _load_from_socket(sock_info, NoOpSerializer()) as stream:
            for message in stream:
                yield from batch_rows(pa.ipc.read_record_batch(pa.py_buffer(message), schema), topic)


def run_unfiled(sc: Any, submit: Any) -> Any:
    """`submit()` with the thread's SQL execution id cleared, then put back (see the module docstring)."""
    held = sc.getLocalProperty(EXECUTION_ID)
    sc.setLocalProperty(EXECUTION_ID, None)
    try:
        return submit()
    finally:
        sc.setLocalProperty(EXECUTION_ID, held)
