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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EXECUTION_ID = "spark.sql.execution.id"  # SparkContext.SQL_EXECUTION_ID_KEY


def rows_by_partition(df: "DataFrame") -> Iterator[Any]:
    """The rows of `df` (pyspark Rows), partition after partition, in partition order."""
    from pyspark.serializers import BatchedSerializer, CPickleSerializer
    from pyspark.util import _load_from_socket

    sc = df.sparkSession.sparkContext
    jvm: Any = sc._jvm
    pickled = df._jdf.javaToPython()  # JavaRDD of pickled row batches, as DataFrame.rdd and toLocalIterator use
    serializer: Any = BatchedSerializer(CPickleSerializer())  # type: ignore[no-untyped-call]
    for index in range(pickled.getNumPartitions()):
        sock_info = run_unfiled(sc, lambda index=index: jvm.PythonRDD.runJob(sc._jsc.sc(), pickled, [index]))
        with _load_from_socket(sock_info, serializer) as stream:
            yield from stream


def run_unfiled(sc: Any, submit: Any) -> Any:
    """`submit()` with the thread's SQL execution id cleared, then put back (see the module docstring)."""
    held = sc.getLocalProperty(EXECUTION_ID)
    sc.setLocalProperty(EXECUTION_ID, None)
    try:
        return submit()
    finally:
        sc.setLocalProperty(EXECUTION_ID, held)
