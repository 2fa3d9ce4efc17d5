"""Test-side Kafka clients (confluent-kafka): produce inputs, read outputs as a read_committed consumer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
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


def read_to_end(bootstrap: str, topics: list[str], on_record: Callable[[Any], None], *, timeout: float,
                enough: Callable[[], bool] = lambda: True, quiet: float = 10.0) -> bool:
    """Hands every record of `topics` to `on_record`, as a read_committed consumer from the beginning, until it is
    at the end of every partition of every topic and `enough()` holds (or `quiet` seconds passed without a
    record); holds nothing. False when `timeout` came first."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "isolation.level": "read_committed", "enable.partition.eof": True,
    })
    consumer.subscribe(topics)
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(10000, 0.5):
                where = (msg.topic(), msg.partition())
                if msg.error():
                    if msg.error().code() != KafkaError._PARTITION_EOF:
                        raise AssertionError(f"consuming {topics}: {msg.error()}")
                    at_end.add(where)
                    continue
                at_end.discard(where)
                last = time.monotonic()
                on_record(msg)
            assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
            every = {t for t, _ in assigned} == set(topics) and at_end >= assigned
            if every and (enough() or time.monotonic() - last > quiet):
                return True
        return False
    finally:
        consumer.close()


def count_backlog(bootstrap: str, topic: str, records: int, *, timeout: float = 300.0,
                  order: bool = False) -> tuple[int, ...]:
    """(missing, duplicated, foreign) of a produce_backlog backlog as a read_committed consumer sees it on
    `topic`: keys never seen, extra copies of keys seen, records with another key. With `order`, a fourth
    count in the same pass: records whose numbered key is lower than the one before it in its partition (0:
    each partition in the order it was produced). Reads to the end of every partition (after every key was
    seen, or after 10 s without a record); counts, holds nothing."""
    counts = bytearray(records)
    tally = {"seen": 0, "duplicated": 0, "foreign": 0, "late": 0}
    last: dict[int, int] = {}

    def count(msg: Any) -> None:
        key = msg.key()
        index = int(key) if key and key.isdigit() else -1
        if index < last.get(msg.partition(), -1):
            tally["late"] += 1
        last[msg.partition()] = index
        if not 0 <= index < records:
            tally["foreign"] += 1
        elif counts[index]:
            tally["duplicated"] += 1
        else:
            counts[index] = 1
            tally["seen"] += 1

    read_to_end(bootstrap, [topic], count, timeout=timeout, enough=lambda: tally["seen"] >= records)
    found = (records - tally["seen"], tally["duplicated"], tally["foreign"])
    return (*found, tally["late"]) if order else found
