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


def produce_backlog(bootstrap: str, topic: str, records: int, value_bytes: int = 100) -> None:
    """A backlog of `records` records keyed "0" .. str(records - 1), each value `value_bytes` long."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 200000, "compression.type": "lz4"})
    for i in range(records):
        key = str(i).encode()
        value = key.rjust(value_bytes, b".")
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    assert left == 0, f"{left} records to {topic} were not acknowledged within 300s"


def count_backlog(bootstrap: str, topic: str, records: int, *, timeout: float = 300.0) -> tuple[int, int, int]:
    """(missing, duplicated, foreign) of a produce_backlog backlog as a read_committed consumer sees it on
    `topic`: keys never seen, extra copies of keys seen, records with another key. Reads to the end of
    every partition (after every key was seen, or after 10 s without a record); counts, holds nothing."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True,
    })
    consumer.subscribe([topic])
    counts = bytearray(records)
    seen = foreign = duplicated = 0
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(10000, 0.5)
            for msg in batch:
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(f"consuming {topic}: {msg.error()}")
                    eof.add(msg.partition())
                    continue
                eof.discard(msg.partition())
                last = time.monotonic()
                key = msg.key()
                index = int(key) if key and key.isdigit() else -1
                if not 0 <= index < records:
                    foreign += 1
                elif counts[index]:
                    duplicated += 1
                else:
                    counts[index] = 1
                    seen += 1
            partitions = {p.partition for p in consumer.assignment()}
            at_end = bool(partitions) and eof >= partitions
            if at_end and (seen >= records or time.monotonic() - last > 10):
                break
    finally:
        consumer.close()
    return records - seen, duplicated, foreign
