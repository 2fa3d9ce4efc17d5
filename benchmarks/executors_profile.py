"""Where an executors-mode batch's time goes: the task's path taken apart, stage by stage, same run.

Run by hand (not a test):

    python benchmarks/executors_profile.py [--records 1000000] [--partitions 2] [--repeat 2]

Starts its own broker (testbed.kafka, KRaft, loopback) and writes a backlog of numbered
records with 100-byte values (tests/kafka/kafka_io.produce_backlog). Then, in one Spark
session (`local[2]`, a task per Kafka partition, as `sink.kafka.producers: executors`
runs a pass-through batch), it reads the whole backlog as one batch DataFrame in the shape
the sink's tasks get it (job_runtime.kafka.sink.records, key and value as binary) and
runs it to the end once per stage, each stage adding one step of the task's path:

- `read`: Spark's noop writer (the Kafka read and the projection, all in the JVM);
- `arrow`: mapInArrow, the Python worker only counts the Arrow batches' rows (the hand-over);
- `arrow+headers`: the same with a `headers` column of null maps, as the sink's tasks got it
  before, whatever `headersColumn` said (beside the path: the sink sends it only with one);
- `rows`: each batch made Python objects (`to_pydict`) and walked record by record
  (job_runtime.kafka.task_chunks.batch_rows);
- `digest`: + the order-independent record digest: the sink's own check task
  (job_runtime.kafka.task_publish.digest_partition);
- `produce`: + librdkafka `produce` of every record, idempotent, no transaction, flushed;
- `transaction`: the same inside one Kafka transaction per task (init, begin, commit),
  the sink's producer settings (job_runtime.kafka.task_publish);
- `spark-writer`: Spark's own Kafka writer (`atLeastOnce`), for the bar.

Per stage: wall seconds (median of --repeat, the order alternating), records/s, and the
machine's CPU busy share over the stage (/proc/stat): a stage near 100 % is bound by the two
cores, one well below waits on something. Writes docs/benchmarks/kafka-executors-profile.md.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from report import machine, publish, reproduce

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "kafka"))
from kafka_io import produce_backlog  # noqa: E402

REPORT = REPO / "docs" / "benchmarks" / "kafka-executors-profile.md"
STAGES = ("read", "arrow", "arrow+headers", "rows", "digest", "produce", "transaction", "spark-writer")
RESULT = "n long"


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _count(batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    yield pa.RecordBatch.from_pydict({"n": pa.array([sum(b.num_rows for b in batches)], pa.int64())})


def _walk(batches: Iterator[Any], topic: str, each: Callable[[tuple[Any, ...]], None] | None = None) -> int:
    from job_runtime.kafka.send import batch_rows

    n = 0
    for row in (row for batch in batches for row in batch_rows(batch, topic)):
        if each is not None:
            each(row)
        n += 1
    return n


def _result(n: int) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({"n": pa.array([n], pa.int64())})


def _rows_only(topic: str, batches: Iterator[Any]) -> Iterator[Any]:
    yield _result(_walk(batches, topic))


def _producer(bootstrap: str, transactional_id: str | None) -> Any:
    from confluent_kafka import Producer

    from job_runtime.kafka.task_publish import PRODUCER_SETTINGS

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    return Producer(conf)


def _produce_body(bootstrap: str, topic: str, transactional: bool, run_id: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def body(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from job_runtime.kafka.send import init_transactions, produce
        from job_runtime.kafka.tasks import RowDigest

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        producer = _producer(bootstrap, f"profile-{run_id}/p{partition}" if transactional else None)
        digest = RowDigest()

        def send(row: tuple[Any, ...]) -> None:
            digest.add(*row)
            produce(producer, *row)

        if transactional:
            init_transactions(producer, topic, 60)
            producer.begin_transaction()
        n = _walk(batches, topic, send)
        if transactional:
            producer.commit_transaction(60)
        else:
            left = producer.flush(300)
            assert left == 0, f"{left} records not acknowledged"
        yield _result(n)

    return body


def run_stage(spark: Any, stage: str, bootstrap: str, source: str, target: str, run_id: str,
              headers: bool = False) -> tuple[float, float, int]:
    """(seconds, CPU busy share, records) of one stage over the whole backlog."""
    from pyspark.sql import functions as F

    from job_runtime.kafka.task_publish import RESULT_SCHEMA, digest_partition

    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source).load()
          .select(F.col("key").cast("string").cast("binary").alias("key"),
                  F.col("value").cast("string").cast("binary").alias("value"),
                  *([F.lit(None).cast("map<string,string>").alias("headers")] if headers else [])))
    bodies: dict[str, Callable[[Iterator[Any]], Iterator[Any]]] = {
        "arrow": _count, "arrow+headers": _count, "rows": functools.partial(_rows_only, target),
        "digest": functools.partial(digest_partition, {}, target),
        "produce": _produce_body(bootstrap, target, False, run_id), "transaction": _produce_body(bootstrap, target, True, run_id),
    }
    busy0, total0 = cpu_ticks()
    began = time.monotonic()
    if stage == "read":
        df.write.format("noop").mode("overwrite").save()
        n = -1
    elif stage == "spark-writer":
        df.select("key", "value").write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target).save()
        n = -1
    else:
        schema = RESULT_SCHEMA if stage == "digest" else RESULT  # the sink's own digest task reports `records`
        n = sum(r["records" if stage == "digest" else "n"] for r in df.mapInArrow(bodies[stage], schema).collect())
    seconds = time.monotonic() - began
    busy1, total1 = cpu_ticks()
    return seconds, (busy1 - busy0) / max(total1 - total0, 1), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()

    import os

    from pyspark.sql import SparkSession

    from testbed import locate
    from testbed.kafka import start_kafka

    times: dict[str, list[float]] = {s: [] for s in STAGES}
    busy: dict[str, list[float]] = {s: [] for s in STAGES}
    with tempfile.TemporaryDirectory(prefix="executors-profile-") as tmp:
        work = Path(tmp)
        broker = start_kafka(locate.kafka_dir(), work / "kafka", timeout=180)
        try:
            source = broker.create_topic("backlog", partitions=args.partitions)
            produce_backlog(broker.bootstrap, source, args.records)
            jars = sorted(str(p) for p in Path(os.environ["STREAMJOB_JARS_DIR"]).glob("*.jar"))
            spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                     .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                     .config("spark.jars", ",".join(jars)).getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            run_stage(spark, "arrow", broker.bootstrap, source, "unused", "warm-up")  # the JVM and the workers warm
            for i in range(args.repeat):
                for stage in STAGES if i % 2 == 0 else STAGES[::-1]:
                    target = broker.create_topic(f"out-{stage.replace('+', '-')}-{i}", partitions=args.partitions)
                    seconds, share, n = run_stage(spark, stage, broker.bootstrap, source, target, f"{stage.replace('+', '-')}-{i}",
                                                  headers=stage == "arrow+headers")
                    assert n in (-1, args.records), f"{stage}: {n} records, expected {args.records}"
                    times[stage].append(seconds)
                    busy[stage].append(share)
                    print(f"{stage} #{i}: {seconds:.1f} s, CPU busy {share:.0%}", flush=True)
            spark.stop()
        finally:
            broker.stop()
    write_report(args, times, busy)


def write_report(args: argparse.Namespace, times: dict[str, list[float]], busy: dict[str, list[float]]) -> None:
    rows = []
    previous = None
    for stage in STAGES:
        s = statistics.median(times[stage])
        per = s / args.records * 1e6 * 2  # two tasks side by side: µs of one task per record
        aside = stage in ("spark-writer", "arrow+headers")  # beside the path, not a step of it
        added = "" if previous is None or aside else f"{per - previous:+.1f}"
        rows.append(f"| `{stage}` | {s:.1f} | {args.records / s:,.0f} | {per:.1f} | {added} | {statistics.median(busy[stage]):.0%} |")
        if not aside:
            previous = per
    command = f"python benchmarks/executors_profile.py --records {args.records} --partitions {args.partitions} --repeat {args.repeat}"
    table = "\n".join(rows)
    report = f"""# Kafka sink, executors producing: where a task's time goes

One batch DataFrame of {args.records:,} records (100-byte values, {args.partitions} Kafka partitions, so
{args.partitions} tasks in `local[2]`) in the shape `sink.kafka.producers: executors` gives its tasks,
run to the end once per stage; each stage adds one step of the task's path
(`benchmarks/executors_profile.py` says which); `arrow+headers` is `arrow` with a column of
null header maps, which the tasks got before this report whether the sink had a `headersColumn`
or not. Median of {args.repeat}, the order alternating.
"µs per record per task" is the wall time over the records a task handles: the cost of one
record on one of the two cores when both work; "added" is what the step adds to the stage above.

| stage | seconds | records/s | µs per record per task | added | CPU busy |
| --- | --- | --- | --- | --- | --- |
{table}

{machine()}

{reproduce(command)}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
