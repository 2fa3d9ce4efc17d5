"""Runtime throughput: a windowed aggregation run by the StreamJob runtime vs the same query in plain PySpark.

Run by hand (not a test):

    python benchmarks/runtime_bench.py [--files 12] [--rows-per-file 40000] [--repeat 2]

Both contenders are separate processes over the same input in the same run,
alternating (runtime, plain, runtime, plain, ...) so load on the machine hits
both alike. Each processes every file as one micro-batch (maxFilesPerTrigger=1,
Trigger.AvailableNow) into a file sink: events per user per 10-second tumbling
window with a 10-second watermark. The plain script uses the same engine
settings the runtime sets (RocksDB state store with changelog checkpointing,
shuffle partitions), so the ratio isolates what the runtime adds: its
control endpoint, status, the pipeline builder, the savepoint-ready set-up.

Throughput = input rows / query time (from start() returning to the query's
end; JVM start-up and query planning excluded for both; the runtime notices
the end by polling every 0.5 s, which counts against it). Writes
docs/benchmarks/runtime.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from job_runtime.query.progress import read_batch_line
from report import machine, publish, reproduce

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "docs" / "benchmarks" / "runtime.md"
BASE_S = 1_704_067_200
PARTITIONS = 2

PLAIN = r'''
import json, sys, time
from pyspark.sql import SparkSession
events, out, ckpt, partitions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
spark = (SparkSession.builder.master("local[2]").appName("plain-bench")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", partitions)
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
         .getOrCreate())
spark.sparkContext.setLogLevel("WARN")
df = (spark.readStream.format("json").schema("user STRING, ts TIMESTAMP, amount INT")
      .option("maxFilesPerTrigger", "1").load(events).withWatermark("ts", "10 seconds"))
df.createOrReplaceTempView("events")
result = spark.sql("SELECT user, window.start AS window_start, window.end AS window_end, count(*) AS events, "
                   "sum(amount) AS total FROM events GROUP BY user, window(ts, '10 seconds')")
query = (result.writeStream.format("json").option("path", out).option("checkpointLocation", ckpt)
         .outputMode("append").trigger(availableNow=True).start())
started = time.monotonic()  # like the runtime's "started query" line: after start() returned
query.awaitTermination()
print("BENCH " + json.dumps({"seconds": time.monotonic() - started}), flush=True)
spark.stop()
'''


def write_input(directory: Path, files: int, rows_per_file: int, seed: int = 3) -> int:
    """JSON-lines event files, one per micro-batch, mtimes in order; ~2 % of rows arrive late."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    first = time.time() - files - 10
    for i in range(files):
        start = BASE_S + i * 8
        lines = []
        for _ in range(rows_per_file):
            ts = start + rng.random() * 8 - (30 if rng.random() < 0.02 else 0)
            stamp = datetime.fromtimestamp(ts, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            lines.append(json.dumps({"user": f"u{rng.randrange(2000)}", "ts": stamp, "amount": rng.randint(1, 9)}))
        path = directory / f"events-{i:05d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (first + i, first + i))
    return files * rows_per_file


def runtime_job(events: Path, out: Path, target: Path) -> Path:
    import yaml

    job = yaml.safe_load((REPO / "examples" / "jobs" / "tumbling.yaml").read_text())
    job["pipeline"]["sources"][0]["path"] = events.as_uri()
    job["pipeline"]["sink"]["path"] = out.as_uri()
    target.write_text(json.dumps(job))
    return target


def _stamp(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def runtime_command(work: Path, job: Path, checkpoint: Path, trigger: str = "available-now", name: str = "bench",
                    state_partitions: int = PARTITIONS) -> list[str]:
    """The runtime run command line for `job` (one local[2] driver, no UI)."""
    token = work / "token"
    token.write_text("bench")
    return [sys.executable, "-m", "job_runtime.main", "run", "--job", str(job), "--name", name, "--namespace", "bench",
            "--checkpoint", checkpoint.as_uri(), "--state-partitions", str(state_partitions),
            "--trigger-interval", trigger, "--token-file", str(token), "--master", "local[2]",
            "--conf", "spark.ui.enabled=false"]


def run_available_now(work: Path, job: Path, checkpoint: Path, name: str = "bench", state_partitions: int = PARTITIONS) -> float:
    """Runs `job` to its end (Trigger.AvailableNow); the query time from the runtime's own log lines.
    The runtime's log is kept beside the checkpoint (`<checkpoint>.log`: batch_phases reads it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(runtime_command(work, job, checkpoint, name=name, state_partitions=state_partitions), cwd=work, env=env,
                            capture_output=True, text=True, check=False)
    checkpoint.with_suffix(".log").write_text(result.stderr)
    if result.returncode != 0:
        raise SystemExit(f"runtime run failed ({result.returncode}):\n{result.stderr[-3000:]}")
    lines = result.stderr.splitlines()
    started = next(_stamp(line) for line in lines if "started query" in line)
    finished = next(_stamp(line) for line in lines if "finished query" in line)
    return finished - started


def batch_phases(checkpoint: Path) -> list[dict[str, int]]:
    """Each batch's id, input rows, state rows and Spark durationMs phases (ms), from the runtime's batch log lines
    (progress.read_batch_line) of a run_available_now run."""
    lines = checkpoint.with_suffix(".log").read_text().splitlines()
    return [batch for line in lines if (batch := read_batch_line(line)) is not None]


def run_runtime(work: Path, events: Path, index: int) -> float:
    job = runtime_job(events, work / f"runtime-out-{index}", work / f"runtime-job-{index}.json")
    return run_available_now(work, job, work / f"runtime-ckpt-{index}")


def run_plain(work: Path, events: Path, index: int) -> float:
    script = work / "plain.py"
    script.write_text(PLAIN)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(script), events.as_uri(), (work / f"plain-out-{index}").as_uri(),
         (work / f"plain-ckpt-{index}").as_uri(), str(PARTITIONS)],
        cwd=work, env=env, capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"plain run failed ({result.returncode}):\n{result.stderr[-3000:]}")
    line = next(line for line in result.stdout.splitlines() if line.startswith("BENCH "))
    return float(json.loads(line[len("BENCH "):])["seconds"])


def output_rows(directory: Path) -> int:
    """Rows the file sink committed (files listed in _spark_metadata)."""
    count = 0
    for entry in sorted((directory / "_spark_metadata").iterdir()):
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:
            path = Path(re.sub(r"^file:(//)?", "", json.loads(line)["path"]))
            count += sum(1 for row in path.read_text().splitlines() if row.strip())
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--rows-per-file", type=int, default=40_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="runtime-bench-") as tmp:
        work = Path(tmp)
        events = work / "events"
        rows = write_input(events, args.files, args.rows_per_file)
        runtime_s, plain_s = [], []
        for i in range(args.repeat):
            runtime_s.append(run_runtime(work, events, i))
            print(f"runtime run {i}: {runtime_s[-1]:.1f} s", flush=True)
            plain_s.append(run_plain(work, events, i))
            print(f"plain   run {i}: {plain_s[-1]:.1f} s", flush=True)
        same = output_rows(work / "runtime-out-0") == output_rows(work / "plain-out-0")

    rt, pl = statistics.median(runtime_s), statistics.median(plain_s)
    rt_rate, pl_rate = rows / rt, rows / pl

    command = (
        f"python benchmarks/runtime_bench.py --files {args.files} --rows-per-file {args.rows_per_file} --repeat {args.repeat}"
    )
    report = f"""# Runtime throughput

The StreamJob runtime running the tumbling-window example pipeline
(`examples/jobs/tumbling.yaml`) against the same query written by hand in plain
PySpark with the same engine settings (RocksDB state store with changelog
checkpointing, {PARTITIONS} shuffle partitions), same input, same run, alternating.
Each input file is one micro-batch (`maxFilesPerTrigger=1`, `Trigger.AvailableNow`),
file sink, 10-second windows, 10-second watermark, ~2 % late rows.
Throughput is input rows divided by query time (from `start()` returning to the
query's end; JVM start-up and planning excluded for both; the runtime notices the
end by polling every 0.5 s, which counts against it). The ratio is runtime / plain:
1.0 means no overhead, above 1.0 is noise in the runtime's favour.

| | runtime | plain PySpark |
| --- | --- | --- |
| query time, median of {args.repeat} (s) | {rt:.1f} | {pl:.1f} |
| all runs (s) | {", ".join(f"{s:.1f}" for s in runtime_s)} | {", ".join(f"{s:.1f}" for s in plain_s)} |
| throughput (rows/s) | {rt_rate:,.0f} | {pl_rate:,.0f} |
| **ratio runtime / plain** | **{rt_rate / pl_rate:.2f}** | |

Input: {args.files} files x {args.rows_per_file:,} rows = {rows:,} rows, 2,000 users.
Both produced the same number of output rows: {"yes" if same else "NO"}.

{machine()}

{reproduce(command)}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
