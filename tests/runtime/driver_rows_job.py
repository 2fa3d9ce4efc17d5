"""Run as a child process by tests/runtime/test_driver_rows.py: a streaming query whose
foreachBatch reads each micro-batch on the driver, partition by partition, the way the
driver mode of the exactly-once Kafka sink does (job_runtime.kafka.driver_rows), or with
`toLocalIterator` (argv[2]: "driver_rows" or "toLocalIterator").

argv: checkpoint dir, reader, batches. Each batch is 3 partitions of 500 rows (a file per
batch, read as text with maxFilesPerTrigger 1). Prints one JSON line: every value read, in
order (a list a batch), and once the query has ended and the scheduler has settled, the jobs Spark's DAG
scheduler still holds filed under a SQL execution (`activeQueryToJobs`: what it holds on to,
with the partitions they returned). Every batch's own execution has ended by then.
"""

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from job_runtime.kafka.driver_rows import rows_by_partition

work, reader, batches = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
inputs = work / "in"
inputs.mkdir(parents=True)
for b in range(batches):
    (inputs / f"part-{b:03d}.txt").write_text("".join(f"{b * 1500 + i}\n" for i in range(1500)))
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "3")
    # the reader asks the JVM for the Arrow types it reads with, whatever the session's own settings say;
    # and a partition of 500 rows comes as three Arrow batches
    .config("spark.sql.execution.arrow.useLargeVarTypes", "true")
    .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
scheduler = spark.sparkContext._jsc.sc().dagScheduler()
seen: list[list[int]] = []
first: list[int] = []  # the one record a stopped reader read, a batch


def held_jobs() -> int:
    # a live ConcurrentHashMap of execution id -> jobs, read through its entries (py4j would look its Long
    # keys up as Integers)
    return sum(entry.getValue().size() for entry in scheduler.activeQueryToJobs().entrySet())


def settled_held_jobs(deadline: float = 20.0) -> int:
    """The count once it has not changed for 2 s (the scheduler lets an execution's jobs go on its event loop)."""
    readings: list[int] = []
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        readings.append(held_jobs())
        if len(readings) >= 5 and len(set(readings[-5:])) == 1:
            break
        time.sleep(0.5)
    return readings[-1]


def each_batch(batch, batch_id):
    ordered = batch.selectExpr("CAST(value AS BIGINT) AS n").repartitionByRange(3, "n").sortWithinPartitions("n")
    if reader == "driver_rows":  # in the sink's record shape (job_runtime.kafka.sink.records): binary key and value
        records = ordered.selectExpr("CAST(CAST(n AS STRING) AS BINARY) AS key", "CAST(CAST(n AS STRING) AS BINARY) AS value")
        # a reader stopped after one record (the sink's publish failing) lets go of the partition it had
        # fetched ahead; the batch is then read again in full
        stopped = rows_by_partition(records, "out")
        first.append(int(next(stopped)[2]))
        stopped.close()
        seen.append([int(value) for _topic, _key, value, _headers in rows_by_partition(records, "out")])
    else:
        seen.append([row["n"] for row in ordered.toLocalIterator(prefetchPartitions=True)])


query = (
    spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(str(inputs))
    .writeStream.foreachBatch(each_batch).option("checkpointLocation", str(work / "checkpoint"))
    .trigger(availableNow=True).start()
)
query.awaitTermination(240)
print(json.dumps({"seen": seen, "first": first, "batches": query.lastProgress["batchId"] + 1, "held": settled_held_jobs()}))
spark.stop()
