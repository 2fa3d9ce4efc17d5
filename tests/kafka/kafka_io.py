"""Test-side Kafka clients (confluent-kafka): produce inputs, read outputs as a read_committed consumer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from typing import Any


def produce_json(bootstrap: str, topic: str, rows: Iterable[dict[str, Any]], key: str | None = None) -> int:
    """Writes each row as a JSON value (keyed by `row[key]` when given); returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    count = 0
    for row in rows:
        producer.produce(topic, value=json.dumps(row).encode(), key=str(row[key]).encode() if key else None)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    assert left == 0, f"{left} records to {topic} were not acknowledged within 60s"
    return count


def consume_all(bootstrap: str, topic: str, expect: int | None = None, *, timeout: float = 60.0,
                isolation: str = "read_committed") -> list[Any]:
    """Every message of `topic` from the beginning, as a `read_committed` consumer by default.

    Reads until `expect` messages were seen (then a short grace period, so
    duplicates beyond it are caught) or until the end of every partition when
    `expect` is None; gives up at `timeout`.
    """
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True,
    })
    consumer.subscribe([topic])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout
    grace_until: float | None = None
    eof: set[int] = set()
    try:
        while time.monotonic() < deadline:
            if grace_until is not None and time.monotonic() > grace_until:
                break
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(msg.partition())
                    partitions = consumer.assignment()
                    if expect is None and partitions and eof >= {p.partition for p in partitions}:
                        break
                    continue
                raise AssertionError(f"consuming {topic}: {msg.error()}")
            messages.append(msg)
            if expect is not None and len(messages) >= expect and grace_until is None:
                grace_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return messages
