"""A new transactional producer's init_transactions: librdkafka's plain call against the sink's start.

Starts its own broker (testbed.kafka, KRaft, loopback). Each task of an exactly-once batch
with `producers: executors` makes a producer and initialises it, so the time `init_transactions`
takes is paid on every task of every batch. A new producer's first coordinator query can find
no broker up yet, and librdkafka tries again only on its coordinator timer, about 500 ms later
(`debug: eos` shows "Unable to query for transaction coordinator: ... No brokers available").
`job_runtime.kafka.send.init_transactions` asks for the sink topic's metadata twice first.

Side by side in one run, rounds alternating: a fresh producer each time (as a task makes one),
`init_transactions` timed, then one record sent in a transaction as a task would. Writes
docs/benchmarks/kafka-producer-init.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report import machine, publish, reproduce  # noqa: E402

REPORT = ROOT / "docs" / "benchmarks" / "kafka-producer-init.md"
SLOW = 0.3  # seconds: an init that waited on librdkafka's coordinator timer


def plain(producer: Any, topic: str, timeout: float) -> None:
    producer.init_transactions(timeout)


def timed_inits(bootstrap: str, topic: str, start: Callable[[Any, str, float], None], label: str, count: int) -> list[float]:
    from confluent_kafka import Producer

    seconds = []
    for i in range(count):
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{label}-{i % 2}",
                             "enable.idempotence": True, "linger.ms": 5})
        began = time.monotonic()
        start(producer, topic, 30.0)
        seconds.append(time.monotonic() - began)
        producer.begin_transaction()
        producer.produce(topic, b"x")
        producer.commit_transaction(30)
        producer.flush(0)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inits", type=int, default=30, help="producers per round and way")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()

    from job_runtime.kafka.send import init_transactions
    from testbed import locate
    from testbed.kafka import start_kafka

    ways: dict[str, Callable[[Any, str, float], None]] = {"plain init_transactions": plain, "job_runtime.kafka.send": init_transactions}
    found: dict[str, list[float]] = {name: [] for name in ways}
    with tempfile.TemporaryDirectory(prefix="kafka-producer-init-") as tmp:
        broker = start_kafka(locate.kafka_dir(), Path(tmp) / "kafka", timeout=180)
        try:
            topic = broker.create_topic("sink", partitions=2)
            for r in range(args.rounds):
                names = list(ways) if r % 2 == 0 else list(ways)[::-1]
                for name in names:
                    found[name] += timed_inits(broker.bootstrap, topic, ways[name], f"{r}-{name[:5]}", args.inits)
                    print(f"round {r} {name}: {sum(s > SLOW for s in found[name])} slow so far", flush=True)
        finally:
            broker.stop()

    rows = "\n".join(
        f"| {name} | {len(s)} | {statistics.median(s) * 1000:.0f} | {sorted(s)[int(len(s) * 0.9)] * 1000:.0f} | "
        f"{max(s) * 1000:.0f} | {sum(x > SLOW for x in s)} ({sum(x > SLOW for x in s) / len(s):.0%}) | {sum(s):.1f} |"
        for name, s in found.items())
    command = f"python benchmarks/kafka_producer_init.py --inits {args.inits} --rounds {args.rounds}"
    publish(args.report, f"""# Kafka: a new transactional producer's start

Every task of an exactly-once batch with `producers: executors` makes a transactional producer and
initialises it (`init_transactions` fences every earlier attempt of its partition), so this is paid
on every task of every batch. A fresh producer each time, as a task makes one; two transactional
ids used in turn, each with a committed transaction just before (as the previous batch's task
left it); {args.rounds} rounds of {args.inits} per way, the order alternating; one broker on loopback.
"Slow" is an init over {SLOW * 1000:.0f} ms: one that waited on librdkafka's coordinator timer
([delivery.md](../delivery.md#measured), `job_runtime/kafka/send.py`).

| way | inits | median (ms) | p90 (ms) | max (ms) | slow | total (s) |
| --- | --- | --- | --- | --- | --- | --- |
{rows}

{machine()}

{reproduce(command)}""")


if __name__ == "__main__":
    main()
