"""Kafka -> aggregation -> Kafka: the exactly-once sink vs Spark's at-least-once Kafka writer, and latency.

Run by hand (not a test):

    python benchmarks/kafka_bench.py [--events 300000] [--users 5000] [--repeat 2] [--latency-seconds 60]

Starts its own broker (testbed.kafka, KRaft, loopback). Throughput: the runtime
runs examples/jobs/kafka_windows.yaml (Kafka -> 10-second windows per user ->
Kafka) over the same input topic twice per repeat, once with `delivery:
exactlyOnce` and once with `delivery: atLeastOnce` (Spark's built-in Kafka
writer), alternating which goes first, each to a fresh output topic and
checkpoint, `Trigger.AvailableNow`. Throughput = input events / query time (the
runtime's "started query" to "finished query" log lines; JVM start-up
excluded). Both outputs are read back (read_committed) and counted.

Latency: a pass-through job (Kafka -> SELECT -> Kafka) at a processing-time
trigger; a producer sends records carrying their send time at a steady rate,
a read_committed consumer notes when each becomes visible. Median and p99 of
(visible - sent), for both delivery modes. Writes docs/benchmarks/kafka.md.
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
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from runtime_bench import PARTITIONS, runtime_command, run_available_now
from report import machine, publish, reproduce

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "kafka"))
from kafka_io import consume_all  # noqa: E402

REPORT = REPO / "docs" / "benchmarks" / "kafka.md"
BASE_MS = 1_704_067_200_000
STEP_MS = 10  # event time advances 10 ms per event: 1,000 events per 10-second window
DELIVERIES = ("exactlyOnce", "atLeastOnce")


def input_events(events: int, users: int, seed: int = 5, step_ms: int = STEP_MS) -> Iterator[tuple[str, int, int]]:
    """The benchmark's input, (user, amount, event time in ms) in produce order: the same sequence for a seed."""
    import random

    rng = random.Random(seed)
    for i in range(events):
        yield f"u{rng.randrange(users)}", rng.randint(1, 9), BASE_MS + i * step_ms


def produce_input(bootstrap: str, topic: str, events: int, users: int, seed: int = 5, step_ms: int = STEP_MS) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 200000})
    for i, (user, amount, timestamp) in enumerate(input_events(events, users, seed, step_ms)):
        value = json.dumps({"user": user, "amount": amount}).encode()
        while True:
            try:
                producer.produce(topic, key=user.encode(), value=value, timestamp=timestamp)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise SystemExit(f"input to {topic} not acknowledged within 120s")


def windows_job(path: Path, bootstrap: str, source: str, target: str, delivery: str, max_offsets: int | None) -> Path:
    """examples/jobs/kafka_windows.yaml on `source` -> `target`; max_offsets None leaves maxOffsetsPerTrigger unset."""
    job = yaml.safe_load((REPO / "examples" / "jobs" / "kafka_windows.yaml").read_text())
    options = job["pipeline"]["sources"][0]["options"]
    options.update({"kafka.bootstrap.servers": bootstrap, "subscribe": source, "maxOffsetsPerTrigger": str(max_offsets)})
    if max_offsets is None:
        del options["maxOffsetsPerTrigger"]
    job["pipeline"]["sink"]["kafka"].update({"bootstrapServers": bootstrap, "topic": target, "delivery": delivery})
    path.write_text(json.dumps(job))
    return path


def passthrough_job(path: Path, bootstrap: str, source: str, target: str, delivery: str, starting: str = "latest",
                    producers: str | None = None) -> Path:
    """A Kafka -> Kafka copy; `producers` sets sink.kafka.producers (the default when None)."""
    sink: dict[str, object] = {"bootstrapServers": bootstrap, "topic": target, "keyColumn": "id", "valueColumn": "sent", "delivery": delivery}
    if producers:
        sink["producers"] = producers
    job = {"pipeline": {
        "sources": [{"name": "pings", "kind": "kafka",
                     "options": {"kafka.bootstrap.servers": bootstrap, "subscribe": source, "startingOffsets": starting}}],
        "transforms": [{"name": "out", "sql": "SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS sent FROM pings"}],
        "sink": {"kind": "kafka", "kafka": sink},
    }}
    path.write_text(json.dumps(job))
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def stop_group(proc: subprocess.Popen[Any]) -> None:
    """Ends a process started in its own session and everything it started (PyFlink's JVM)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def latency_through(work: Path, broker: Any, label: str, launch: Callable[[str, str, Any], subprocess.Popen[Any]],
                    seconds: float, rate: int) -> list[float]:
    """probe_latency through a pass-through job `launch(source, target, output file)` starts (in a session of its
    own), once a warm-up record came through it (the job is running) and 10 s more (as measure_latency gives ours:
    the first checkpoints are not steady state)."""
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:6]
    source, target = broker.create_topic(f"pings-{suffix}"), broker.create_topic(f"pongs-{suffix}")
    out = work / f"latency-{label.replace(' ', '-')}.out"
    with out.open("wb") as sink:
        proc = launch(source, target, sink)
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(source, key=b"warm-up", value=repr(time.time()).encode())
        producer.flush(30)
        if not consume_all(broker.bootstrap, target, expect=1, timeout=300):
            raise SystemExit(f"{label}'s pass-through job published nothing within 300s:\n{out.read_text(errors='replace')[-3000:]}")
        time.sleep(10)
        return probe_latency(broker.bootstrap, source, target, seconds, rate, label=label, skip_keys={b"warm-up"})
    finally:
        stop_group(proc)


def measure_latency(work: Path, broker: Any, delivery: str, trigger: str, seconds: float, rate: int) -> list[float]:
    """(visible - sent) in ms for every record sent at `rate`/s for `seconds` through the runtime's pass-through job
    with `delivery` at `trigger` (its checkpoint latency-ckpt-<delivery>), latency_through: warmed up by a record
    first, so that the probe's first records do not meet the process's first batch with data (its consumer, tasks
    and code paths cold: 1-2 s against a steady 0.2-0.3 s, which was the p99 before 2026-12-07)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def launch(source: str, target: str, sink: Any) -> subprocess.Popen[Any]:
        job = passthrough_job(work / f"latency-{delivery}.json", broker.bootstrap, source, target, delivery,
                              starting="earliest")  # the warm-up record may be sent before the query starts
        return subprocess.Popen(runtime_command(work, job, work / f"latency-ckpt-{delivery}", trigger=trigger,
                                                name=f"latency-{delivery.lower()}"),
                                cwd=work, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)

    return latency_through(work, broker, delivery, launch, seconds, rate)


def probe_latency(bootstrap: str, source: str, target: str, seconds: float, rate: int, label: str,
                  skip_keys: frozenset[bytes] | set[bytes] = frozenset()) -> list[float]:
    """Sends records carrying their send time to `source` at `rate`/s for `seconds`; (visible - sent) in ms
    for each as a read_committed consumer of `target` sees it (records keyed by one of `skip_keys`, a
    warm-up, not counted). A pass-through job must be running."""
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    assigned = threading.Event()
    consumer.subscribe([target], on_assign=lambda _consumer, _partitions: assigned.set())
    joined_by = time.monotonic() + 60
    while not assigned.is_set() and time.monotonic() < joined_by:  # joined before the first send: its join is not latency
        consumer.poll(0.1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    sent = int(seconds * rate)

    def send() -> None:
        start = time.time()
        for i in range(sent):
            wait = start + i / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            producer.produce(source, key=str(i).encode(), value=repr(time.time()).encode())
            producer.poll(0)
        producer.flush(30)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    latencies: list[float] = []
    stop_at = time.monotonic() + seconds + 60
    while len(latencies) < sent and time.monotonic() < stop_at:
        msg = consumer.poll(0.2)
        if msg is None or msg.error() or msg.key() in skip_keys:
            continue
        latencies.append((time.time() - float(msg.value())) * 1000)
    sender.join(30)
    consumer.close()
    if len(latencies) < sent:
        raise SystemExit(f"latency ({label}): {len(latencies)} of {sent} records visible within {seconds + 60:.0f}s")
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--users", type=int, default=5_000)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--latency-seconds", type=float, default=60)
    parser.add_argument("--latency-rate", type=int, default=200)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()

    from testbed import locate
    from testbed.kafka import start_kafka

    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        work = Path(tmp)
        broker = start_kafka(locate.kafka_dir(), work / "kafka", timeout=180)
        try:
            source = broker.create_topic("events", partitions=2)
            produce_input(broker.bootstrap, source, args.events, args.users)
            seconds: dict[str, list[float]] = {d: [] for d in DELIVERIES}
            outputs: dict[str, list[int]] = {d: [] for d in DELIVERIES}
            for i in range(args.repeat):
                for delivery in DELIVERIES if i % 2 == 0 else DELIVERIES[::-1]:
                    target = broker.create_topic(f"windows-{delivery.lower()}-{i}", partitions=2)
                    job = windows_job(work / f"{delivery}-{i}.json", broker.bootstrap, source, target, delivery,
                                      args.max_offsets_per_trigger)
                    seconds[delivery].append(run_available_now(work, job, work / f"ckpt-{delivery}-{i}", name=f"bench-{i}"))
                    outputs[delivery].append(len(consume_all(broker.bootstrap, target, timeout=300)))
                    print(f"{delivery} run {i}: {seconds[delivery][-1]:.1f} s, {outputs[delivery][-1]} output records", flush=True)
            latency = {d: measure_latency(work, broker, d, args.trigger, args.latency_seconds, args.latency_rate)
                       for d in DELIVERIES}
        finally:
            broker.stop()

    write_report(args, seconds, outputs, latency)


def write_report(args: argparse.Namespace, seconds: dict[str, list[float]], outputs: dict[str, list[int]],
                 latency: dict[str, list[float]]) -> None:
    eo, alo = (statistics.median(seconds[d]) for d in DELIVERIES)
    eo_rate, alo_rate = args.events / eo, args.events / alo
    same = len({n for d in DELIVERIES for n in outputs[d]}) == 1
    command = (f"python benchmarks/kafka_bench.py --events {args.events} --users {args.users} "
               f"--max-offsets-per-trigger {args.max_offsets_per_trigger} --repeat {args.repeat} "
               f"--trigger '{args.trigger}' --latency-seconds {args.latency_seconds:g} --latency-rate {args.latency_rate}")

    def lat(d: str, q: float) -> str:
        return f"{percentile(latency[d], q):,.0f}"

    report = f"""# Kafka sink: throughput and latency

## Throughput: exactly-once vs Spark's at-least-once writer

The StreamJob runtime running `examples/jobs/kafka_windows.yaml` (Kafka -> 10-second
tumbling windows per user, 10-second watermark -> Kafka, JSON values keyed by user)
over one input topic, once with the exactly-once sink (`sink.kafka.delivery:
exactlyOnce`: one Kafka transaction per micro-batch, produced by the driver) and once
with Spark's built-in Kafka writer (`delivery: atLeastOnce`: produced by the
executors' tasks, no transaction), same input, same run, alternating which goes first.
`Trigger.AvailableNow`, `maxOffsetsPerTrigger` {args.max_offsets_per_trigger:,}, {PARTITIONS} state
partitions, `local[2]`, one broker on loopback. Throughput is input events divided by
query time (the runtime's "started query" to "finished query"; JVM start-up excluded).

| | exactlyOnce | atLeastOnce (Spark's writer) |
| --- | --- | --- |
| query time, median of {args.repeat} (s) | {eo:.1f} | {alo:.1f} |
| all runs (s) | {", ".join(f"{s:.1f}" for s in seconds["exactlyOnce"])} | {", ".join(f"{s:.1f}" for s in seconds["atLeastOnce"])} |
| throughput (input events/s) | {eo_rate:,.0f} | {alo_rate:,.0f} |
| output records per run | {", ".join(map(str, outputs["exactlyOnce"]))} | {", ".join(map(str, outputs["atLeastOnce"]))} |
| **ratio exactlyOnce / atLeastOnce** | **{eo_rate / alo_rate:.2f}** | |

Input: {args.events:,} events, {args.users:,} users, event time advancing {STEP_MS} ms per event
(about {10_000 // STEP_MS:,} events per window), 2 partitions. Every run wrote the same number of
records (read back with `isolation.level=read_committed`): {"yes" if same else "NO"}.

## Latency: produce -> visible to a read_committed consumer

A pass-through job (Kafka -> `SELECT key, value` -> Kafka) at trigger
`{args.trigger}`; {args.latency_rate} records/s for {args.latency_seconds:g} s, each carrying its send
time; a `read_committed` consumer notes when each becomes visible (after a 10 s warm-up
of the running job). Same broker, one job at a time.

| {args.trigger} trigger | exactlyOnce | atLeastOnce |
| --- | --- | --- |
| median (ms) | {lat("exactlyOnce", 0.5)} | {lat("atLeastOnce", 0.5)} |
| p99 (ms) | {lat("exactlyOnce", 0.99)} | {lat("atLeastOnce", 0.99)} |
| records | {len(latency["exactlyOnce"]):,} | {len(latency["atLeastOnce"]):,} |

With exactly-once, a record becomes visible when its micro-batch's transaction commits:
the wait for the next trigger, the batch, then the commit. With Spark's writer it is
visible once acknowledged, within the batch.

{machine()} When the runs of one mode spread more than the two modes differ,
read the ratio as "no measurable difference", not as one mode being faster.

{reproduce(command)}"""
    publish(args.report, report)


if __name__ == "__main__":
    main()
