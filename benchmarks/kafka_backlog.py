"""A first deploy on a Kafka backlog: the exactly-once sink vs Spark's at-least-once writer, same run.

Run by hand (not a test):

    python benchmarks/kafka_backlog.py [--records 1000000] [--partitions 2] [--repeat 1]

Starts its own broker (testbed.kafka, KRaft, loopback) and writes a backlog of
numbered records with 100-byte values (tests/kafka/kafka_io.produce_backlog).
The runtime then runs a pass-through job (Kafka -> `SELECT key, value` -> Kafka,
benchmarks/kafka_bench.passthrough_job) over it as a new user would deploy it:
`startingOffsets: earliest`, no maxOffsetsPerTrigger, `local[2]`, the default
driver memory, `Trigger.AvailableNow`; once with `delivery: exactlyOnce` and
once with `delivery: atLeastOnce` (Spark's own Kafka writer), alternating which
goes first, each to a fresh topic and checkpoint. Per run: the exit code, the
query time (the runtime's "started query" to "finished query" log lines, as
kafka_bench), the process's wall time (launch to exit: the JVM's and the
session's start and the sink's set-up counted), the batches planned, the peak memory of the driver's process tree
(the runtime's Python process, its JVM and the tasks' Python workers,
sampled every 0.2 s from /proc: tree_memory),
and what a read_committed consumer sees (missing and duplicated records).
Writes docs/benchmarks/kafka-backlog.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafka_bench import passthrough_job
from job_runtime.kafka import budget
from runtime_bench import _stamp, runtime_command
from report import machine, publish, reproduce

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "kafka"))
from kafka_io import count_backlog, produce_backlog  # noqa: E402

REPORT = REPO / "docs" / "benchmarks" / "kafka-backlog.md"
# (label, delivery, producers): the exactly-once sink with the driver producing (the default), with the
# executors producing (sink.kafka.producers: executors), and Spark's own at-least-once writer
MODES = (("exactlyOnce", "exactlyOnce", None), ("exactlyOnce/executors", "exactlyOnce", "executors"), ("atLeastOnce", "atLeastOnce", None))
PAGE = os.sysconf("SC_PAGE_SIZE")


def process_tree(root: int) -> dict[int, int]:
    """Process `root` and every process below it, each with its depth under `root` (0 for `root`).

    The tree, not the process group: pyspark's daemon puts itself and the tasks' Python workers
    in a process group of their own, so a process-group sum leaves them out (it did before
    2026-11-28)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after state
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
    tree, frontier, depth = {root: 0}, {root}, 0
    while frontier:
        depth += 1
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in tree}
        tree.update(dict.fromkeys(frontier, depth))
    return tree


def tree_memory(tree: dict[int, int]) -> tuple[int, int, int]:
    """Bytes resident in the processes of `tree` (process_tree), now, in three parts: the runtime's Python
    process (depth 0, RSS), its JVM (depth 1, RSS) and below them pyspark's daemon and the Python workers it
    forks (PSS: they share pages, which a sum of RSS counts once per worker). PSS is read only where it is
    needed: reading it walks a process's page tables, which for the JVM costs more CPU than the run can
    spare on 2 cores."""
    parts = [0, 0, 0]
    for pid, depth in tree.items():
        try:
            if depth <= 1:
                parts[depth] += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
            else:
                parts[2] += next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                                 if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue  # ended meanwhile
    return parts[0], parts[1], parts[2]


@dataclass
class Run:
    delivery: str
    code: int
    seconds: float
    peak_parts: tuple[int, int, int]  # at the peak: runtime Python, JVM, Python workers (tree_memory)
    batches: int
    missing: int
    duplicated: int
    quarters: tuple[int, ...] = ()  # the peak (bytes, all parts) in each quarter of the run's wall time: flat or growing
    wall: float = float("nan")  # the runtime process's launch to its exit: JVM and session start, the sink's start

    @property
    def quarters_gb(self) -> str:
        return " / ".join(f"{q / 1e9:.2f}" for q in self.quarters)

    @property
    def peak_memory(self) -> int:
        return sum(self.peak_parts)

    @property
    def peak_memory_gb(self) -> float:
        return self.peak_memory / 1e9

    @property
    def peak_parts_gb(self) -> str:
        return " / ".join(f"{part / 1e9:.2f}" for part in self.peak_parts)


def run_once(work: Path, bootstrap: str, source: str, target: str, delivery: str, label: str,
             producers: str | None = None) -> tuple[int, float, tuple[int, int, int], int, tuple[int, ...], float]:
    """(exit code, query seconds, memory at the peak in bytes (tree_memory's parts), batches, the peak in each
    quarter of the run, the process's wall seconds) of one runtime run to the end of the backlog."""
    job = passthrough_job(work / f"{label}.json", bootstrap, source, target, delivery, starting="earliest", producers=producers)
    checkpoint = work / f"ckpt-{label}"
    log_path = work / f"{label}.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(runtime_command(work, job, checkpoint, name=label.lower()), cwd=work, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[tuple[float, tuple[int, int, int]]] = []  # (seconds since the start, tree_memory's parts)
    done = threading.Event()
    began = time.monotonic()

    def sample() -> None:
        tree, found = {proc.pid: 0}, 0.0
        while not done.is_set():
            if time.monotonic() - found > 1.0:  # the workers come and go; scanning /proc each sample costs too much CPU
                tree, found = process_tree(proc.pid), time.monotonic()
            samples.append((time.monotonic() - began, tree_memory(tree)))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        code = proc.wait(3600)
        wall = time.monotonic() - began
    finally:
        done.set()
        sampler.join(5)
    lines = log_path.read_text(errors="replace").splitlines()
    started = [_stamp(line) for line in lines if "started query" in line]
    finished = [_stamp(line) for line in lines if "finished query" in line]
    seconds = finished[-1] - started[0] if code == 0 and started and finished else float("nan")
    if code != 0:
        print(f"{label}: exit {code}\n" + "\n".join(lines[-40:]), flush=True)
    # the newest batch id + 1: Spark keeps only the last 100 offset files (spark.sql.streaming.minBatchesToRetain)
    ids = [int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()] if (checkpoint / "offsets").exists() else []
    batches = max(ids) + 1 if ids else 0
    peak = max((parts for _, parts in samples), key=sum, default=(0, 0, 0))
    quarters = [0, 0, 0, 0]
    end = samples[-1][0] if samples else 0.0
    for t, parts in samples:
        q = min(3, int(4 * t / end)) if end else 0
        quarters[q] = max(quarters[q], sum(parts))
    return code, seconds, peak, batches, tuple(quarters), wall if code == 0 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--report", type=Path, default=REPORT)
    parser.add_argument("--modes", default=",".join(m for m, _, _ in MODES),
                        help="which modes to run, comma-separated (a trial: the report's other columns stay empty)")
    parser.add_argument("--keep-logs", type=Path, help="copy each run's runtime log into this folder")
    args = parser.parse_args()
    unknown = set(args.modes.split(",")) - {m for m, _, _ in MODES}
    if unknown:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))}; the modes are {', '.join(m for m, _, _ in MODES)}")
    modes = tuple(m for m in MODES if m[0] in args.modes.split(","))

    from testbed import locate
    from testbed.kafka import start_kafka

    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="kafka-backlog-") as tmp:
        work = Path(tmp)
        broker = start_kafka(locate.kafka_dir(), work / "kafka", timeout=180)
        try:
            source = broker.create_topic("backlog", partitions=args.partitions)
            began = time.monotonic()
            produce_backlog(broker.bootstrap, source, args.records)
            print(f"backlog of {args.records:,} records in {time.monotonic() - began:.0f} s", flush=True)
            for i in range(args.repeat):
                for mode, delivery, producers in modes if i % 2 == 0 else modes[::-1]:
                    label = f"{mode.replace('/', '-')}-{i}"
                    target = broker.create_topic(f"copy-{label.lower()}", partitions=args.partitions)
                    code, seconds, peak, batches, quarters, wall = run_once(work, broker.bootstrap, source, target, delivery, label,
                                                                            producers)
                    missing, duplicated, _ = count_backlog(broker.bootstrap, target, args.records, timeout=1800)
                    runs.append(Run(mode, code, seconds, peak, batches, missing, duplicated, quarters, wall))
                    if args.keep_logs is not None:
                        args.keep_logs.mkdir(parents=True, exist_ok=True)
                        shutil.copy(work / f"{label}.log", args.keep_logs / f"{label}.log")
                    print(f"{label}: {runs[-1]}", flush=True)
        finally:
            broker.stop()
    write_report(args, runs)


def write_report(args: argparse.Namespace, runs: list[Run]) -> None:

    def of(delivery: str) -> list[Run]:
        return [r for r in runs if r.delivery == delivery]

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    def shown(value: float, spec: str) -> str:
        """A figure, or "-" for a mode not run here (its median is nan)."""
        return "-" if value != value else format(value, spec)

    eo, ex, alo = of("exactlyOnce"), of("exactlyOnce/executors"), of("atLeastOnce")
    eo_s, ex_s, alo_s = (median([r.seconds for r in rs]) for rs in (eo, ex, alo))
    eo_w, ex_w, alo_w = (median([r.wall for r in rs]) for rs in (eo, ex, alo))
    eo_mem, ex_mem, alo_mem = (median([r.peak_memory for r in rs]) for rs in (eo, ex, alo))
    command = f"python benchmarks/kafka_backlog.py --records {args.records} --partitions {args.partitions} --repeat {args.repeat}"
    if args.modes != ",".join(m for m, _, _ in MODES):
        command += f" --modes {args.modes}"
    report_path = args.report.resolve()
    if report_path != REPORT:
        command += f" --report {report_path.relative_to(REPO) if report_path.is_relative_to(REPO) else report_path}"

    def cells(rs: list[Run], f: str) -> str:
        return ", ".join(f.format(r=r) for r in rs)

    report = f"""# Kafka sink: a first deploy on a backlog

A pass-through job (Kafka -> `SELECT key, value` -> Kafka) deployed on a backlog of
{args.records:,} records (100-byte values, {args.partitions} partitions) as a new user would:
`startingOffsets: earliest`, no `maxOffsetsPerTrigger`, every sink setting at its default,
the default driver memory, `local[2]`, `Trigger.AvailableNow`; once in each mode run here
({", ".join(f"`{m}`" for m in args.modes.split(","))}) per repeat, same input, same run, the order
alternating between repeats, each to a fresh topic and checkpoint. The modes:
- `exactlyOnce` with the driver producing (the default, `producers: driver`): one Kafka
  transaction per batch, the batch capped at {budget.batch_cap(60_000):,} records by the default 60 s transaction
  timeout, read as Spark partitions of at most {budget.PARTITION_RECORDS:,} records
  ([delivery.md](../delivery.md#no-batch-is-too-big));
- `exactlyOnce/executors` (`producers: executors`): each task sends its partition in a transaction
  of its own with a task marker, the driver then commits the batch marker
  ([delivery.md](../delivery.md#who-produces-the-driver-or-the-executors)); the batch capped at
  {budget.batch_cap(60_000, executors=True):,} records (a task's rate floor, {budget.TASK_RECORDS_PER_SECOND_FLOOR / budget.RECORDS_PER_SECOND_FLOOR:g} times the driver's);
- `atLeastOnce`: Spark's own Kafka writer, produced by the tasks, no transaction.

Query time is the runtime's "started query" to "finished query" (JVM start-up excluded); the
process's wall time runs from the runtime's launch to its exit, so it also counts the JVM's and the
session's start and the sink's own start (its transactional producers' initialisation); peak
memory is the driver's process tree: the RSS of the runtime's Python process and its JVM (which in
`local[2]` also runs the tasks) and the PSS of the tasks' Python workers (pyspark's daemon puts them
in a process group of their own; PSS so that the pages they share with the daemon count once),
sampled every 0.2 s. The output is read back with `isolation.level=read_committed` and every key
counted.

| | exactlyOnce (driver) | exactlyOnce/executors | atLeastOnce (Spark's writer) |
| --- | --- | --- | --- |
| exit codes | {cells(eo, "{r.code}")} | {cells(ex, "{r.code}")} | {cells(alo, "{r.code}")} |
| query time, median of {args.repeat} (s) | {shown(eo_s, ".1f")} | {shown(ex_s, ".1f")} | {shown(alo_s, ".1f")} |
| all runs (s) | {cells(eo, "{r.seconds:.1f}")} | {cells(ex, "{r.seconds:.1f}")} | {cells(alo, "{r.seconds:.1f}")} |
| process wall time, median (s) | {shown(eo_w, ".1f")} | {shown(ex_w, ".1f")} | {shown(alo_w, ".1f")} |
| all runs, wall (s) | {cells(eo, "{r.wall:.1f}")} | {cells(ex, "{r.wall:.1f}")} | {cells(alo, "{r.wall:.1f}")} |
| throughput (records/s) | {shown(args.records / eo_s, ",.0f")} | {shown(args.records / ex_s, ",.0f")} | {shown(args.records / alo_s, ",.0f")} |
| batches planned | {cells(eo, "{r.batches}")} | {cells(ex, "{r.batches}")} | {cells(alo, "{r.batches}")} |
| driver peak memory (GB) | {cells(eo, "{r.peak_memory_gb:.2f}")} | {cells(ex, "{r.peak_memory_gb:.2f}")} | {cells(alo, "{r.peak_memory_gb:.2f}")} |
| at the peak: runtime Python / JVM / Python workers (GB) | {cells(eo, "{r.peak_parts_gb}")} | {cells(ex, "{r.peak_parts_gb}")} | {cells(alo, "{r.peak_parts_gb}")} |
| peak in each quarter of the run (GB) | {cells(eo, "{r.quarters_gb}")} | {cells(ex, "{r.quarters_gb}")} | {cells(alo, "{r.quarters_gb}")} |
| missing / duplicated (read_committed) | {cells(eo, "{r.missing} / {r.duplicated}")} | {cells(ex, "{r.missing} / {r.duplicated}")} | {cells(alo, "{r.missing} / {r.duplicated}")} |
| **throughput ratio to atLeastOnce** | **{shown(alo_s / eo_s, ".2f")}** | **{shown(alo_s / ex_s, ".2f")}** | |
| **wall time ratio to atLeastOnce** | **{shown(alo_w / eo_w, ".2f")}** | **{shown(alo_w / ex_w, ".2f")}** | |
| **peak memory ratio to atLeastOnce** | **{shown(eo_mem / alo_mem, ".2f")}** | **{shown(ex_mem / alo_mem, ".2f")}** | |

{machine()}

{reproduce(command)}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
