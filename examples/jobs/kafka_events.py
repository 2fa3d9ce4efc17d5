"""Produces a deterministic stream of user events to Kafka for examples/jobs/kafka_windows.yaml.

Values are JSON {"user", "amount"}; the record timestamp is the event time, strictly
increasing by `step_ms`, so no event is late and the windows are easy to check.

    python examples/jobs/kafka_events.py 127.0.0.1:9092 events --count 600
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass

BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
USERS = ("alice", "bob", "carol")


@dataclass(frozen=True)
class Event:
    user: str
    ts_ms: int
    amount: int


def generate(count: int, seed: int = 7, step_ms: int = 500) -> list[Event]:
    rng = random.Random(seed)
    return [Event(rng.choice(USERS), BASE_MS + i * step_ms, rng.randint(1, 9)) for i in range(count)]


def produce(bootstrap: str, topic: str, events: list[Event]) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for e in events:
        producer.produce(topic, key=e.user.encode(), value=json.dumps({"user": e.user, "amount": e.amount}).encode(), timestamp=e.ts_ms)
        producer.poll(0)
    left = producer.flush(60)
    if left:
        raise SystemExit(f"{left} events to {topic} at {bootstrap} were not acknowledged within 60s")
    return len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bootstrap")
    parser.add_argument("topic")
    parser.add_argument("--count", type=int, default=600)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(produce(args.bootstrap, args.topic, generate(args.count, args.seed)))


if __name__ == "__main__":
    main()
