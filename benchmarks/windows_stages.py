"""Where the Kafka -> windows -> Kafka job's time goes: plain Spark, one stage added at a time, beside ours and Flink.

Run by hand (not a test):

    python benchmarks/windows_stages.py [--events 2000000] [--users 1000] [--repeat 2] [--state-partitions 2]

The job of benchmarks/flink_compare.py (examples/jobs/kafka_windows.yaml), on the same input, in the same run:

- plain PySpark (no StreamJob runtime), `local[2]`, Trigger.AvailableNow, the batches ours takes
  (`maxOffsetsPerTrigger` = the exactly-once sink's cap), the query built up one stage at a time:
  `read` (the records' values, Spark's `noop` sink), `read-polled` (the runtime's `kafka.max.poll.records`),
  `parse` (+ from_json), `windows-memory` (+ the windows,
  Spark's default in-memory state store), `windows-rocksdb` (the state store ours runs: RocksDB with
  changelog checkpointing), `kafka-writer` (+ Spark's own Kafka writer: at least once);
- ours: the runtime running the example, exactly once (as flink_compare runs it);
- Flink: as flink_compare runs it (PyFlink, exactly once).

Each stage's time is the query's (from start() returning to its end: JVM start-up and the session excluded, as
for ours); what a stage adds is its time less the stage it builds on. Contenders alternate order over `--repeat`.
Writes docs/benchmarks/windows-stages.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import flink_env
from flink_compare import (FLUSH_AFTER_MS, INPUT_PARTITIONS, Variant, produce_flush, run_flink, stopped,
                           variant_job)
from job_runtime.kafka.budget import batch_cap
from job_runtime.query.pipeline import KAFKA_READ_DEFAULTS
from kafka_bench import BASE_MS, produce_input
from report import machine, publish, reproduce
from runtime_bench import run_available_now

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "docs" / "benchmarks" / "windows-stages.md"
STAGES = ("read", "read-polled", "parse", "windows-memory", "windows-rocksdb", "kafka-writer")
# what each row's "adds" is measured against
BASE = {"read-polled": "read", "parse": "read", "windows-memory": "parse", "windows-rocksdb": "windows-memory",
        "kafka-writer": "windows-rocksdb", "ours": "windows-rocksdb"}

PLAIN = r'''
import json, os, sys, time
from pyspark.sql import SparkSession
from job_runtime.query.pipeline import KAFKA_READ_DEFAULTS
from job_runtime.query.session import JARS_DIR_ENV, ROCKSDB_PROVIDER, extra_jars
bootstrap, source, target, checkpoint, stage, partitions, cap = sys.argv[1:8]
jars = [str(j) for j in extra_jars(os.environ.get(JARS_DIR_ENV))]  # the runtime's own Kafka jars
builder = (SparkSession.builder.master("local[2]").appName("windows-stages").config("spark.ui.enabled", "false")
           .config("spark.ui.showConsoleProgress", "false").config("spark.jars", ",".join(jars))
           .config("spark.driver.extraClassPath", os.pathsep.join(jars))
           .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", partitions))
if stage in ("windows-rocksdb", "kafka-writer"):
    builder = (builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
               .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"))
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("WARN")
events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", cap)
          .options(**(KAFKA_READ_DEFAULTS if stage == "read-polled" else {})).load())
if stage in ("read", "read-polled"):
    result = events.selectExpr("value")
else:
    events.withWatermark("timestamp", "10 seconds").createOrReplaceTempView("events")
    parsed = spark.sql("SELECT event.user AS user, ts, event.amount AS amount FROM (SELECT from_json(CAST(value AS "
                       "STRING), 'user STRING, amount INT') AS event, timestamp AS ts FROM events)")
    parsed.createOrReplaceTempView("parsed")
    result = parsed if stage == "parse" else spark.sql(
        "SELECT user, window.start AS window_start, window.end AS window_end, count(*) AS events, sum(amount) AS total "
        "FROM parsed GROUP BY user, window(ts, '10 seconds')")
writer = result.writeStream.option("checkpointLocation", checkpoint).outputMode("append").trigger(availableNow=True)
if stage == "kafka-writer":
    writer = (result.selectExpr("CAST(user AS BINARY) AS key", "CAST(to_json(struct(*)) AS BINARY) AS value")
              .writeStream.option("checkpointLocation", checkpoint).outputMode("append").trigger(availableNow=True)
              .format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target))
else:
    writer = writer.format("noop")
query = writer.start()
started = time.monotonic()  # like the runtime's "started query" line: after start() returned
query.awaitTermination()
print("BENCH " + json.dumps({"seconds": time.monotonic() - started,
                             "batches": [p["numInputRows"] for p in query.recentProgress]}), flush=True)
spark.stop()
'''


def run_plain(work: Path, bootstrap: str, source: str, target: str, stage: str, partitions: int, cap: int) -> float:
    """One plain PySpark run of `stage`; its query time (s)."""
    script = work / "stages.py"
    script.write_text(PLAIN)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    checkpoint = (work / f"ckpt-{stage}-{uuid.uuid4().hex[:6]}").as_uri()
    result = subprocess.run([sys.executable, str(script), bootstrap, source, target, checkpoint, stage, str(partitions),
                             str(cap)], cwd=work, env=env, capture_output=True, text=True, check=False, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"{stage} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return float(json.loads(next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))[6:])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--state-partitions", type=int, default=2, help="plain Spark's shuffle partitions and ours")
    parser.add_argument("--interval-seconds", type=int, default=1, help="Flink's checkpoint interval")
    parser.add_argument("--parallelism", type=int, default=os.cpu_count() or 2, help="Flink's parallelism")
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stopped)

    from testbed import locate
    from testbed.kafka import start_kafka

    flink_env.pyflink_python(), flink_env.connector_jar()  # installed before anything is timed
    cap = batch_cap(60_000, None, executors=False)  # the exactly-once sink's cap at the example's transactionTimeoutMs: ours' batches
    ours = Variant(args.state_partitions, None)
    labels = [*STAGES, "ours", "Flink"]
    seconds: dict[str, list[float]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory(prefix="windows-stages-") as tmp:
        work = Path(tmp)
        broker = start_kafka(locate.kafka_dir(), work / "kafka", timeout=180)
        try:
            source = broker.create_topic("events", partitions=INPUT_PARTITIONS)
            produce_input(broker.bootstrap, source, args.events, args.users, step_ms=1)
            produce_flush(broker.bootstrap, source, BASE_MS + args.events + FLUSH_AFTER_MS)
            for i in range(args.repeat):
                for label in labels if i % 2 == 0 else labels[::-1]:
                    target = broker.create_topic(f"out-{uuid.uuid4().hex[:8]}", partitions=INPUT_PARTITIONS)
                    if label == "Flink":
                        took = run_flink(work, broker.bootstrap, source, target, i, args.interval_seconds * 1000,
                                         args.parallelism)[0]
                    elif label == "ours":
                        job = variant_job(work / f"ours-{i}.json", broker.bootstrap, source, target, ours)
                        took = run_available_now(work, job, work / f"ckpt-ours-{i}", name=f"stages-{i}",
                                                 state_partitions=args.state_partitions)
                    else:
                        took = run_plain(work, broker.bootstrap, source, target, label, args.state_partitions, cap)
                    seconds[label].append(took)
                    print(f"run {i} {label}: {took:.1f} s", flush=True)
        finally:
            broker.stop()
    write_report(args, seconds, cap)


def write_report(args: argparse.Namespace, seconds: dict[str, list[float]], cap: int) -> None:
    median = {label: statistics.median(each) for label, each in seconds.items()}
    flink = median["Flink"]
    rows = []
    for label in [*STAGES, "ours", "Flink"]:
        added = f"{median[label] - median[BASE[label]]:+.1f} ({BASE[label]})" if label in BASE else "-"
        rows.append(f"| {label} | {median[label]:.1f} | {', '.join(f'{s:.1f}' for s in seconds[label])} | {added} | "
                    f"{args.events / median[label]:,.0f} | {flink / median[label]:.2f} |")
    command = (f"python benchmarks/windows_stages.py --events {args.events} --users {args.users} --repeat {args.repeat} "
               f"--state-partitions {args.state_partitions} --interval-seconds {args.interval_seconds} "
               f"--parallelism {args.parallelism}")
    table = "\n".join(rows)
    report = f"""# Kafka -> windows -> Kafka: where the time goes, stage by stage

The job of [flink.md](flink.md) (examples/jobs/kafka_windows.yaml): {args.events:,} JSON events, {args.users:,} users,
event time 1 ms apart, 2 partitions, read from the beginning. Plain PySpark (no StreamJob runtime) runs it built up
one stage at a time, `local[2]`, Trigger.AvailableNow, {args.state_partitions} shuffle partitions, the batches ours
takes (`maxOffsetsPerTrigger` {cap:,}, the exactly-once sink's cap); beside them, in the same run, ours (the
runtime, exactly once, statePartitions {args.state_partitions}) and Flink (PyFlink, exactly once, parallelism
{args.parallelism}, checkpoints every {args.interval_seconds} s), as flink_compare.py runs them.

- `read`: the records' values into Spark's `noop` sink (the Kafka source alone, Kafka's consumer defaults);
- `read-polled`: the same with the runtime's read default, `kafka.max.poll.records` {KAFKA_READ_DEFAULTS["kafka.max.poll.records"]}
  (Kafka's default: 500); the stages below use Kafka's defaults, as plain Spark does;
- `parse`: `read` + `from_json` of each value, the record timestamp as event time with its watermark;
- `windows-memory`: + the 10-second windows per user (count, sum), Spark's default in-memory state store;
- `windows-rocksdb`: the same with the state store ours runs, RocksDB with changelog checkpointing;
- `kafka-writer`: + Spark's own Kafka writer (JSON values, at least once: no transaction);
- `ours`: the runtime, exactly once (with its read default); its "adds" is against `windows-rocksdb` (the same
  engine work, our sink in place of `noop`).

Times exclude JVM start-up (from `start()` returning, or the runtime's "started query", to the query's end;
Flink from its first task running to the job finished). {args.repeat} runs each, alternating the order.

| | median (s) | all runs (s) | adds (s, against) | input events/s | Flink's time / this time |
| --- | --- | --- | --- | --- | --- |
{table}

{machine()}

{reproduce(command, setup="after `bash scripts/bootstrap.sh && source .streamjob-env`; the first run installs PyFlink into `~/.cache/streamjob/flink/`")}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
