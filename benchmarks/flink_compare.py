"""Kafka -> 10-second windows per key -> Kafka, exactly once: the StreamJob runtime against PyFlink, same run.

Run by hand (not a test):

    python benchmarks/flink_compare.py [--events 200000] [--users 1000] [--repeat 2] [--variants 8:-,2:-,2:50000]

`--variants`: our configurations, `statePartitions[:maxOffsetsPerTrigger[:delivery[:parse[:pollRecords]]]]`,
comma-separated (`2:-:atLeastOnce`: Spark's own writer, to see what the sink costs;
`2:-::get_json_object`: each value looked up twice with get_json_object, as the example did before it
parsed once with from_json on 2026-12-06; without it, the example's transform as written;
`2:-:::500`: the source sets its own `kafka.max.poll.records`, here Kafka's default, as every source read
before the runtime's default of 100,000 on 2026-12-07).

Starts its own broker (testbed.kafka). One input topic (2 partitions) is produced once
(kafka_bench's generator, event time 1 ms apart, the Kafka record timestamp), then one
"flush" record per partition 60 s of event time later so that every window of the input
closes on both engines (Flink's watermark is the minimum over partitions, Spark's the
maximum); the flush windows are left out of every comparison. Each contender reads the
topic from the beginning into its own output topic:

- ours: the runtime running examples/jobs/kafka_windows.yaml with `delivery: exactlyOnce`,
  `Trigger.AvailableNow`, once per `--variants` entry (`statePartitions:maxOffsetsPerTrigger`,
  `-` leaving maxOffsetsPerTrigger unset, as a user who sets nothing: the sink's batch cap
  then decides); the query time from the runtime's log lines (kafka_bench / runtime_bench).
- Flink: benchmarks/flink_job.py in PyFlink's own virtualenv (benchmarks/flink_env.py),
  Flink SQL on a local mini-cluster, the Kafka source bounded at the offsets it finds at start,
  checkpoints every `--interval-seconds`, `sink.delivery-guarantee: exactly-once`. Its time
  runs from the first task switching to RUNNING (the mini-cluster up, the job deployed) to the
  job FINISHED (its final checkpoint committed), from the Flink log; the times from the last
  task RUNNING (its sink's transactional producers set up too) and from submission are
  reported beside it.

Alternating which engine goes first over `--repeat`. Each output is read back by a
read_committed consumer and compared with windows computed in Python from the same
generator: missing, duplicated and wrong windows per run.

Latency: a pass-through job (Kafka -> key, value -> Kafka) on each engine at the same
interval (our trigger, Flink's checkpoint interval), records sent at a steady rate, each
carrying its send time; p50 and p99 of (visible to read_committed - sent)
(kafka_bench.probe_latency); beside them the same micro-batches with Spark's own writer (at least once: what
a micro-batch costs a record whatever its sink) and Spark's real-time mode; `--latency-seconds 0` skips it. Writes docs/benchmarks/flink.md;
`--save-results` keeps the raw figures (after every run) and `--render` writes the report from them.
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
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import flink_env
from job_runtime.query.progress import BATCH_PHASES
from kafka_bench import (BASE_MS, input_events, latency_through, measure_latency, percentile, produce_input, stop_group,
                         windows_job)
from report import machine, publish, reproduce
from runtime_bench import _stamp, batch_phases, run_available_now

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "kafka"))
from kafka_io import consume_all  # noqa: E402

REPORT = REPO / "docs" / "benchmarks" / "flink.md"
FLINK_JOB = Path(__file__).resolve().parent / "flink_job.py"
INPUT_PARTITIONS = 2
WINDOW_MS = 10_000
FLUSH_USER = "~flush"
FLUSH_AFTER_MS = 60_000

Window = tuple[str, int]  # (user, window start in epoch ms)


@dataclass(frozen=True)
class Variant:
    """One configuration of our runtime: state partitions, maxOffsetsPerTrigger (None: unset) and the
    sink's delivery (atLeastOnce, Spark's own writer, is not a contender: it shows what the sink costs)."""

    state_partitions: int
    max_offsets: int | None
    delivery: str = "exactlyOnce"
    parse_json: str = ""  # "" the example's `parsed` transform as written, or a key of PARSED_SQL
    poll_records: str = ""  # the source's own kafka.max.poll.records; "" the runtime's default

    @property
    def label(self) -> str:
        offsets = "unset" if self.max_offsets is None else f"{self.max_offsets:,}"
        label = f"ours, statePartitions {self.state_partitions}, maxOffsetsPerTrigger {offsets}"
        if self.parse_json:
            label += f", {self.parse_json}"
        if self.poll_records:
            label += f", kafka.max.poll.records {int(self.poll_records):,}"
        return label if self.delivery == "exactlyOnce" else f"{label}, {self.delivery} (not exactly once)"

    @staticmethod
    def parse(text: str) -> "Variant":
        parts = text.split(":")  # statePartitions[:maxOffsetsPerTrigger[:delivery[:parse[:pollRecords]]]]
        offsets = parts[1] if len(parts) > 1 else "-"
        variant = Variant(int(parts[0]), None if offsets in ("", "-") else int(offsets), *[p or d for p, d in zip(
            parts[2:5], ("exactlyOnce", "", ""))])
        if variant.parse_json and variant.parse_json not in PARSED_SQL:
            raise SystemExit(f"--variants {text}: parse {variant.parse_json!r} is none of {', '.join(PARSED_SQL)}")
        return variant


PARSED_SQL = {  # the example's `parsed` transform written another way (the example's own is the default)
    "get_json_object": "SELECT get_json_object(CAST(value AS STRING), '$.user') AS user, timestamp AS ts, "
                       "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS INT) AS amount FROM events",
}


def variant_job(path: Path, bootstrap: str, source: str, target: str, variant: Variant) -> Path:
    """kafka_bench.windows_job for `variant`; its `parsed` transform replaced when the variant names a parse."""
    job = windows_job(path, bootstrap, source, target, variant.delivery, variant.max_offsets)
    spec = json.loads(job.read_text())
    if variant.parse_json:
        parsed = next(t for t in spec["pipeline"]["transforms"] if t["name"] == "parsed")
        parsed["sql"] = PARSED_SQL[variant.parse_json]
    if variant.poll_records:
        spec["pipeline"]["sources"][0]["options"]["kafka.max.poll.records"] = variant.poll_records
    job.write_text(json.dumps(spec))
    return job


@dataclass
class Check:
    """One output topic against the reference windows."""

    records: int = 0
    missing: int = 0
    duplicated: int = 0
    wrong: int = 0  # a window not in the input, or with other figures

    def __str__(self) -> str:
        return f"{self.records:,} records, {self.missing} missing, {self.duplicated} duplicated, {self.wrong} wrong"


@dataclass
class Runs:
    seconds: list[float] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    submitted: list[float] = field(default_factory=list)  # Flink only: from submission
    after_init: list[float] = field(default_factory=list)  # Flink only: from the last task running
    batches: list[int] = field(default_factory=list)  # ours only: micro-batches (the checkpoint's commit log)
    batch_seconds: list[list[float]] = field(default_factory=list)  # ours only: offsets/N to commits/N, per batch
    phases: list[list[dict[str, int]]] = field(default_factory=list)  # ours only: Spark's durationMs, per batch


def batch_seconds(checkpoint: Path) -> list[float]:
    """Each micro-batch's time from its offset log entry (planned) to its commit log entry (done), from mtimes."""
    done = sorted(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    return [(checkpoint / "commits" / str(n)).stat().st_mtime - (checkpoint / "offsets" / str(n)).stat().st_mtime
            for n in done]


def reference(events: int, users: int, step_ms: int) -> dict[Window, tuple[int, int]]:
    """(events, total amount) per user and 10-second window of the generated input."""
    counts: Counter[Window] = Counter()
    totals: Counter[Window] = Counter()
    for user, amount, ts in input_events(events, users, step_ms=step_ms):
        window = (user, ts - ts % WINDOW_MS)
        counts[window] += 1
        totals[window] += amount
    return {w: (counts[w], totals[w]) for w in counts}


def epoch_ms(stamp: str) -> int:
    """A window bound as either engine writes it ("2024-01-01T00:00:10.000Z" or "2024-01-01 00:00:10")."""
    parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def check(messages: list[Any], expected: dict[Window, tuple[int, int]]) -> Check:
    result = Check()
    seen: set[Window] = set()
    for msg in messages:
        row = json.loads(msg.value())
        if row["user"] == FLUSH_USER:
            continue
        result.records += 1
        window = (row["user"], epoch_ms(row["window_start"]))
        if window in seen:
            result.duplicated += 1
        elif expected.get(window) != (int(row["events"]), int(row["total"])):
            result.wrong += 1
        seen.add(window)
    result.missing = len(expected.keys() - seen)
    return result


def produce_flush(bootstrap: str, topic: str, timestamp: int) -> None:
    """One record per partition at `timestamp`: moves both engines' watermarks past every input window."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    value = json.dumps({"user": FLUSH_USER, "amount": 0}).encode()
    for partition in range(INPUT_PARTITIONS):
        producer.produce(topic, key=FLUSH_USER.encode(), value=value, timestamp=timestamp, partition=partition)
    if producer.flush(30):
        raise SystemExit(f"flush records to {topic} not acknowledged within 30s")


def flink_env_vars(log_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["FLINK_LOG_DIR"] = str(log_dir)
    return env


def flink_command(mode: str, bootstrap: str, source: str, target: str, checkpoint: Path, interval_ms: int,
                  parallelism: int) -> list[str]:
    return [str(flink_env.pyflink_python()), str(FLINK_JOB), mode, "--bootstrap", bootstrap, "--source", source,
            "--target", target, "--jar", str(flink_env.connector_jar()), "--checkpoint-dir", str(checkpoint),
            "--checkpoint-ms", str(interval_ms), "--parallelism", str(parallelism),
            "--transactional-id", f"flink-bench-{uuid.uuid4().hex[:8]}"]


def flink_running_seconds(log_dir: Path) -> tuple[float, float]:
    """From the first and from the last task switching to RUNNING to the job FINISHED, from the Flink log."""
    lines = [line for path in sorted(log_dir.glob("*.log")) for line in path.read_text(errors="replace").splitlines()]
    running = [_stamp(line) for line in lines if "ExecutionGraph" in line and "from INITIALIZING to RUNNING" in line]
    finished = [_stamp(line) for line in lines if "switched from state RUNNING to FINISHED" in line]
    if not running or not finished:
        raise SystemExit(f"no task start or job end in the Flink log in {log_dir}")
    return finished[-1] - min(running), finished[-1] - max(running)


def run_flink(work: Path, bootstrap: str, source: str, target: str, index: int, interval_ms: int,
              parallelism: int, timeout: float = 1800) -> tuple[float, float, float]:
    """The Flink windows job over the backlog: seconds from the first task running, from the last, from submission."""
    log_dir = work / f"flink-log-{index}"
    log_dir.mkdir()
    out = work / f"flink-{index}.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(flink_command("windows", bootstrap, source, target, work / f"flink-ckpt-{index}",
                                              interval_ms, parallelism),
                                cwd=work, env=flink_env_vars(log_dir), stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        code = proc.wait(timeout)
    finally:
        stop_group(proc)
    text = out.read_text(errors="replace")
    if code != 0:
        raise SystemExit(f"Flink job failed ({code}):\n{text[-3000:]}")
    submitted = next(json.loads(line[len("BENCH "):])["seconds"] for line in text.splitlines() if line.startswith("BENCH "))
    return (*flink_running_seconds(log_dir), submitted)


def flink_latency(work: Path, broker: Any, interval_ms: int, parallelism: int, seconds: float, rate: int) -> list[float]:
    """latency_through Flink's pass-through job."""
    log_dir = work / "flink-log-latency"
    log_dir.mkdir()

    def launch(source: str, target: str, sink: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(flink_command("passthrough", broker.bootstrap, source, target, work / "flink-ckpt-latency",
                                              interval_ms, parallelism),
                                cwd=work, env=flink_env_vars(log_dir), stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)

    return latency_through(work, broker, "Flink", launch, seconds, rate)


REALTIME = r'''
import os, sys
from pyspark.sql import SparkSession
from job_runtime.query.session import JARS_DIR_ENV, extra_jars
bootstrap, source, target, checkpoint, duration = sys.argv[1:6]
jars = [str(j) for j in extra_jars(os.environ.get(JARS_DIR_ENV))]  # the runtime's own Kafka jars
spark = (SparkSession.builder.master("local[2]").appName("realtime-latency").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.jars", ",".join(jars))
         .config("spark.driver.extraClassPath", os.pathsep.join(jars)).getOrCreate())
spark.sparkContext.setLogLevel("WARN")
rows = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
        .option("startingOffsets", "earliest").load().selectExpr("key", "value"))
(rows.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
 .option("checkpointLocation", checkpoint).outputMode("update").trigger(realTime=duration).start().awaitTermination())
'''


REALTIME_MIN_SECONDS = 5  # spark.sql.streaming.realTimeMode.minBatchDuration's default: Spark refuses a shorter one


def realtime_interval(seconds: int) -> int:
    """The real-time trigger's duration for a run at `seconds`: the same, or Spark's minimum (5 s) when shorter.
    It is the checkpoint interval there, not a latency bound: records are published as they come."""
    return max(seconds, REALTIME_MIN_SECONDS)


def realtime_latency(work: Path, broker: Any, interval_seconds: int, seconds: float, rate: int) -> list[float]:
    """latency_through a plain PySpark pass-through job in Spark's real-time mode (`trigger(realTime=...)`,
    Spark's own Kafka writer: at least once, not a contender), its checkpoint every realtime_interval(...)."""
    script = work / "realtime.py"
    script.write_text(REALTIME)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def launch(source: str, target: str, sink: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen([sys.executable, str(script), broker.bootstrap, source, target,
                                 (work / "realtime-ckpt").as_uri(), f"{realtime_interval(interval_seconds)} seconds"],
                                cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)

    return latency_through(work, broker, "real-time mode", launch, seconds, rate)


def stopped(signum: int, _frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def trigger_text(seconds: int) -> str:
    return "1 second" if seconds == 1 else f"{seconds} seconds"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--step-ms", type=int, default=1, help="event time between two input events")
    parser.add_argument("--variants", default="8:-,2:-,2:50000",
                        help="ours: statePartitions:maxOffsetsPerTrigger, comma-separated ('-': unset); the first is the headline")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--interval-seconds", type=int, default=1, help="our trigger interval and Flink's checkpoint interval")
    parser.add_argument("--parallelism", type=int, default=os.cpu_count() or 2, help="Flink's parallelism (the cores)")
    parser.add_argument("--latency-seconds", type=float, default=60)
    parser.add_argument("--latency-rate", type=int, default=200)
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--save-results", type=Path, help="also write the raw figures here (JSON)")
    parser.add_argument("--render", type=Path, help="only write the report from results saved by --save-results")
    args = parser.parse_args()
    if args.render:
        render(args.render, args.report)
        return
    variants = [Variant.parse(v) for v in args.variants.split(",")]
    signal.signal(signal.SIGTERM, stopped)  # a timeout's TERM unwinds too: the broker, Flink and the runtime stopped

    from testbed import locate
    from testbed.kafka import start_kafka

    flink_env.pyflink_python(), flink_env.connector_jar()  # installed before anything is timed
    expected = reference(args.events, args.users, args.step_ms)
    runs: dict[str, Runs] = {v.label: Runs() for v in variants}
    runs["Flink"] = Runs()
    interval_ms = args.interval_seconds * 1000
    with tempfile.TemporaryDirectory(prefix="flink-compare-") as tmp:
        work = Path(tmp)
        broker = start_kafka(locate.kafka_dir(), work / "kafka", timeout=180)
        try:
            source = broker.create_topic("events", partitions=INPUT_PARTITIONS)
            produce_input(broker.bootstrap, source, args.events, args.users, step_ms=args.step_ms)
            produce_flush(broker.bootstrap, source, BASE_MS + args.events * args.step_ms + FLUSH_AFTER_MS)
            for i in range(args.repeat):
                order: list[Variant | None] = [*variants, None] if i % 2 == 0 else [None, *variants]
                for contender in order:
                    label = "Flink" if contender is None else contender.label
                    target = broker.create_topic(f"windows-{uuid.uuid4().hex[:8]}", partitions=INPUT_PARTITIONS)
                    if contender is None:
                        seconds, after_init, submitted = run_flink(work, broker.bootstrap, source, target, i,
                                                                   interval_ms, args.parallelism)
                        runs[label].submitted.append(submitted)
                        runs[label].after_init.append(after_init)
                    else:
                        job = variant_job(work / f"ours-{i}-{target}.json", broker.bootstrap, source, target, contender)
                        seconds = run_available_now(work, job, work / f"ckpt-{target}", name=f"bench-{i}",
                                                    state_partitions=contender.state_partitions)
                        runs[label].batch_seconds.append(batch_seconds(work / f"ckpt-{target}"))
                        runs[label].batches.append(len(runs[label].batch_seconds[-1]))
                        runs[label].phases.append(batch_phases(work / f"ckpt-{target}"))
                    runs[label].seconds.append(seconds)
                    runs[label].checks.append(check(consume_all(broker.bootstrap, target, timeout=600), expected))
                    batches = "" if contender is None else (
                        f", {runs[label].batches[-1]} batches ("
                        f"{', '.join(f'{b:.1f}' for b in runs[label].batch_seconds[-1])} s)")
                    print(f"run {i} {label}: {seconds:.1f} s{batches}, {runs[label].checks[-1]}", flush=True)
                    save(args, runs, {}, len(expected))  # so far: a run cut short keeps what it measured
            latency = {} if not args.latency_seconds else {
                **{key: summary(measure_latency(work, broker, delivery, trigger_text(args.interval_seconds),
                                                args.latency_seconds, args.latency_rate),
                                batch_seconds(work / f"latency-ckpt-{delivery}"))
                   for key, delivery in (("ours", "exactlyOnce"), ("microbatch", "atLeastOnce"))},
                "Flink": summary(flink_latency(work, broker, interval_ms, args.parallelism, args.latency_seconds,
                                               args.latency_rate)),
                "realtime": summary(realtime_latency(work, broker, args.interval_seconds, args.latency_seconds,
                                                     args.latency_rate))}
        finally:
            broker.stop()

    write_report(args, variants, runs, latency, len(expected), save(args, runs, latency, len(expected)))


def save(args: argparse.Namespace, runs: dict[str, Runs], latency: dict[str, dict[str, float]], windows: int) -> str:
    """Writes the raw figures to --save-results (when given); returns the machine paragraph they were measured on."""
    measured = machine()
    if args.save_results:
        results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                   "runs": {label: asdict(r) for label, r in runs.items()}, "latency": latency, "windows": windows,
                   "machine": measured}
        args.save_results.write_text(json.dumps(results, indent=1))
    return measured


def summary(latencies: list[float], batches: list[float] | None = None) -> dict[str, float]:
    """p50, p99 and count of `latencies` (ms); with a micro-batch run's `batches` (batch_seconds), their median in ms."""
    figures = {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99), "records": len(latencies)}
    if batches:
        figures["batch_ms"] = statistics.median(batches) * 1000
    return figures


def render(path: Path, report: Path) -> None:
    """The report again from a run's saved results (--save-results), without running anything."""
    saved = json.loads(path.read_text())
    args = argparse.Namespace(**{**saved["args"], "report": report})
    runs = {label: Runs(**{"phases": [], **r, "checks": [Check(**c) for c in r["checks"]]})
            for label, r in saved["runs"].items() if r["seconds"]}  # a run cut short: the contenders measured
    variants = [v for v in map(Variant.parse, args.variants.split(",")) if v.label in runs]
    write_report(args, variants, runs, saved["latency"], saved["windows"], saved["machine"])


def write_report(args: argparse.Namespace, variants: list[Variant], runs: dict[str, Runs],
                 latency: dict[str, dict[str, float]], windows: int, measured: str) -> None:
    flink = statistics.median(runs["Flink"].seconds)
    flink_rate = args.events / flink
    headline = variants[0].label
    command = (f"python benchmarks/flink_compare.py --events {args.events} --users {args.users} --step-ms {args.step_ms} "
               f"--variants {args.variants} --repeat {args.repeat} --interval-seconds {args.interval_seconds} "
               f"--parallelism {args.parallelism} --latency-seconds {args.latency_seconds:g} --latency-rate {args.latency_rate}")

    def row(label: str) -> str:
        r = runs[label]
        median = statistics.median(r.seconds)
        rate = args.events / median
        worst = Check(missing=max(c.missing for c in r.checks), duplicated=max(c.duplicated for c in r.checks),
                      wrong=max(c.wrong for c in r.checks))
        ratio = "1.00 (reference)" if label == "Flink" else f"**{rate / flink_rate:.2f}**"
        paired = "-" if label == "Flink" else ", ".join(
            f"{f / o:.2f}" for f, o in zip(runs["Flink"].seconds, r.seconds))
        batches = "; ".join(f"{n} ({', '.join(f'{b:.0f}' for b in each)})" for n, each in zip(r.batches, r.batch_seconds)) \
            if r.batch_seconds else (", ".join(map(str, r.batches)) or "-")
        return (f"| {label} | {median:.1f} | {', '.join(f'{s:.1f}' for s in r.seconds)} | {batches} | {rate:,.0f} | {ratio} | {paired} | "
                f"{worst.missing} / {worst.duplicated} / {worst.wrong} |")

    ours_rate = args.events / statistics.median(runs[headline].seconds)
    best = max((v.label for v in variants if v.delivery == "exactlyOnce"),
               key=lambda label: args.events / statistics.median(runs[label].seconds))
    best_rate = args.events / statistics.median(runs[best].seconds)
    correct = all(c.missing == c.duplicated == c.wrong == 0 for r in runs.values() for c in r.checks)

    def met(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    p99 = {k: v["p99"] for k, v in latency.items()}

    def figure(key: str, name: str) -> str:
        return f"{latency[key][name]:,.0f}" if name in latency.get(key, {}) else "not measured"

    def realtime(name: str) -> str:
        return figure("realtime", name)

    floor = (f"; Spark's own writer in the same micro-batches, at least once: {p99['microbatch']:,.0f} ms"
             if "microbatch" in p99 else "")
    latency_goal = (f"{met(p99['ours'] <= p99['Flink'])} ({p99['ours']:,.0f} ms against {p99['Flink']:,.0f} ms{floor})"
                    if latency else "not measured in this run (`--latency-seconds 0`)")
    realtime_goal = (f"p50 {realtime('p50')} ms, p99 {realtime('p99')} ms, at least once (above)" if "realtime" in latency
                     else "not measured in this run")
    rows = "\n".join(row(v.label) for v in variants)
    phase_rows = "\n".join(
        f"| {v.label} | {run} | {b['id']} | {b['rows']:,} | "
        + " | ".join(f"{b[name] / 1000:.1f}" if name in b else "-" for name in BATCH_PHASES) + " |"
        for v in variants for run, each in enumerate(runs[v.label].phases) for b in each)
    phase_section = "" if not phase_rows else f"""### Where our time went

Spark's own account of each micro-batch (its progress report's `durationMs`, in seconds), as the runtime logs it
when the query ends: planning the offsets (`latestOffset`), the plan, the offset log write, the batch itself
(`addBatch`: reading, the state store, the sink) and the commit log write; `triggerExecution` is the whole.

| | run | batch | input rows | {" | ".join(BATCH_PHASES)} |
| --- | --- | --- | --- | {" | ".join("---" for _ in BATCH_PHASES)} |
{phase_rows}

"""
    latency_section = "" if not latency else f"""## Latency: produce -> visible to a read_committed consumer

A pass-through job (Kafka -> key, value -> Kafka) on each engine, exactly once, ours at a
{trigger_text(args.interval_seconds)} trigger, Flink checkpointing every {args.interval_seconds} s (its sink commits when a
checkpoint completes); {args.latency_rate} records/s for {args.latency_seconds:g} s, each carrying its send time, after a
10 s warm-up of the running job; the consumer has joined before the first record is sent. One engine at a time.
Beside them, not contenders (at least once: a record may be published again after a failure): the same
pass-through with Spark's own Kafka writer in the same micro-batches at the same trigger (the runtime with
`delivery: atLeastOnce`: no transaction, the tasks produce; what the micro-batch itself costs a record), and in
plain PySpark in Spark's real-time mode (`trigger(realTime="{realtime_interval(args.interval_seconds)} seconds")`:
long-running tasks, the duration its checkpoint interval, 5 s at the least: Spark's
`spark.sql.streaming.realTimeMode.minBatchDuration`), which runs only Spark's own Kafka writer or `foreach`, not
the `foreachBatch` our exactly-once sink is built on. "Batch" is the median micro-batch from its offset log entry
to its commit log entry (file times) during the run.

| | ours (exactly once) | Flink (exactly once) | Spark's writer, same micro-batches (at least once) | Spark real-time mode (at least once) |
| --- | --- | --- | --- | --- |
| p50 (ms) | {latency["ours"]["p50"]:,.0f} | {latency["Flink"]["p50"]:,.0f} | {figure("microbatch", "p50")} | {realtime("p50")} |
| p99 (ms) | {p99["ours"]:,.0f} | {p99["Flink"]:,.0f} | {figure("microbatch", "p99")} | {realtime("p99")} |
| batch (ms) | {figure("ours", "batch_ms")} | - | {figure("microbatch", "batch_ms")} | - |
| records | {latency["ours"]["records"]:,} | {latency["Flink"]["records"]:,} | {figure("microbatch", "records")} | {realtime("records")} |

"""
    report = f"""# Kafka -> windows -> Kafka, exactly once: StreamJob against PyFlink

The same job on both engines, same broker, same machine, same run: Kafka (JSON
`{{"user", "amount"}}`, the record timestamp as event time, watermark 10 s behind) ->
10-second tumbling windows per user (count, sum) -> Kafka (JSON, keyed by user), exactly
once on both sides.

- **ours**: the StreamJob runtime running `examples/jobs/kafka_windows.yaml` with
  `sink.kafka.delivery: exactlyOnce` (one Kafka transaction per micro-batch),
  `Trigger.AvailableNow`, `local[2]`, RocksDB state store; one row per configuration.
  The first is what a user gets who sets nothing: the operator's default
  `statePartitions` (8) and no `maxOffsetsPerTrigger` (the sink's batch cap, 600,000 records
  at the default `transactionTimeoutMs`, decides).
- **Flink**: PyFlink {flink_env.PYFLINK_VERSION} (`apache-flink` from PyPI, in its own virtualenv),
  the Table API running Flink SQL (`TUMBLE` windowing TVF, no Python UDF), local mini-cluster,
  parallelism {args.parallelism}, Kafka connector `{flink_env.CONNECTOR.split(":", 1)[1]}` with
  `sink.delivery-guarantee = exactly-once`, checkpoints every {args.interval_seconds} s (exactly-once mode,
  local folder), Flink's default (heap) state backend; the source bounded at the offsets
  it finds at start (`scan.bounded.mode = latest-offset`), so the job ends with the backlog.

Input: {args.events:,} events, {args.users:,} users, event time {args.step_ms} ms apart, 2 partitions,
produced once; each run reads it from the beginning into an output topic of its own. One record per
partition 60 s of event time after the last closes every window on both engines (left out of the comparison).

## Throughput on a backlog

Time excludes JVM start-up on both sides. Ours: the runtime's "started query" to
"finished query" log lines (the session, the Kafka producer's `init_transactions` and the
query plan are before it). Flink: from the first task switching to `RUNNING` (the
mini-cluster up, the job deployed: a source can read) to the job `FINISHED` (the final
checkpoint committed), from Flink's log. That window holds the Kafka sink's set-up of its
transactional producers, which on our side is before "started query"; from the last task
`RUNNING` (everything set up, but the sources may already have read) Flink took
{", ".join(f"{s:.1f}" for s in runs["Flink"].after_init)} s, from the job's submission (`execute_sql` returning)
{", ".join(f"{s:.1f}" for s in runs["Flink"].submitted)} s. The ratios use the first, the longest of the two
windows that exclude start-up: the one least favourable to Flink.
Runs: {args.repeat} per contender, alternating which engine goes first. A row marked atLeastOnce is the
same job with Spark's own Kafka writer (no transaction, produced by the tasks): not a
contender, it shows what the exactly-once sink costs. Micro-batches: per run, how many, and
in brackets each one's time from its offset log entry to its commit log entry (file times;
the last is the no-data batch that emits the windows the final watermark closed). The ratio
is of the medians; "per repeat" pairs each run with Flink's run of the same repeat (run next to
it, under the same load), which is what to read when the load changed during the run.

| | median (s) | all runs (s) | micro-batches (s each) | input events/s | ratio ours / Flink | per repeat | worst run: missing / duplicated / wrong windows |
| --- | --- | --- | --- | --- | --- | --- | --- |
{rows}
{row("Flink")}

Each output read back by a `read_committed` consumer and compared with the {windows:,} windows
computed in Python from the same input: every run exact: {"yes" if correct else "**NO**"}.

{phase_section}{latency_section}## Goals (issue 26)

- Throughput >= 1.0x PyFlink's on the same job and input: {met(ours_rate >= flink_rate)} with the defaults
  ({ours_rate / flink_rate:.2f}x); the best configuration measured, {best}: {best_rate / flink_rate:.2f}x.
- p99 latency at most Flink's at the same interval: {latency_goal}.
- Spark 4.3's real-time mode, beside it: {realtime_goal}.

{measured}

{reproduce(command, setup="after `bash scripts/bootstrap.sh && source .streamjob-env`; the first run installs PyFlink into `~/.cache/streamjob/flink/` and the connector jar into `~/.cache/streamjob/jars/`")}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
