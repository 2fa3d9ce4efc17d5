"""The exactly-once sink's producer calls: a transactional producer started, the one send loop, and the
records as Python tuples from the Arrow batches both producers read them in (`batch_rows`).

Called by job_runtime.kafka.sink (the driver producing), job_runtime.kafka.sink_tasks (the
driver fencing its tasks' ids) and job_runtime.kafka.task_publish / task_chunks (the tasks
producing, whole or in chunks).

`init_transactions`: a new producer's first coordinator query finds no broker up when it is
made before librdkafka has connected to a broker by its id (it knows only the bootstrap
address then), and librdkafka tries again only on its coordinator timer, 500 ms later. Every
task makes a producer, so this was half a second on about half the tasks of every batch
(`debug: eos` shows "Unable to query for transaction coordinator: ... No brokers available").
Two metadata requests for the sink's topic first (the second is served by a broker known by
its id, so one is up) cost a few milliseconds: 0 of 120 inits waited on the timer against 59 of
120 without (benchmarks/kafka_producer_init.py, docs/benchmarks/kafka-producer-init.md).

`produce`: the producer's local queue is bounded (`queue.buffering.max.messages` /
`.kbytes`); when it is full, `produce` waits for deliveries to drain instead of failing, so
memory stays bounded whatever the batch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

DRAIN_SECONDS = 0.05  # one poll for delivery reports while the local queue is full

Row = tuple[str, "bytes | None", "bytes | None", Any]  # topic, key, value, headers


def produce(producer: Any, topic: str, key: str | bytes | None, value: str | bytes | None, headers: Any) -> None:
    """Queues one record (str is sent as UTF-8, as confluent_kafka does); `headers` a sequence of
    (name, value) pairs or None."""
    while True:
        try:
            if headers:
                producer.produce(topic, value, key, headers=list(headers))
            else:  # value and key by position: confluent_kafka parses keywords at about 0.7 us a call
                producer.produce(topic, value, key)
            return
        except BufferError:  # the local queue is full: let deliveries drain
            producer.poll(DRAIN_SECONDS)


def init_transactions(producer: Any, topic: str, timeout: float) -> None:
    """`producer.init_transactions(timeout)` once a broker is up (module docstring): fences every earlier
    producer of its transactional id and aborts their open transaction. Raises KafkaException."""
    for _ in range(2):
        producer.list_topics(topic, timeout=timeout)
    producer.init_transactions(timeout)


def batch_rows(batch: "pa.RecordBatch", topic: str) -> Iterator[Row]:
    """(topic, key, value, headers) of every record of an Arrow batch (job_runtime.kafka.sink.records' shape);
    headers None without that column, the topic `topic` (the sink's) without one: a sink with no topicColumn
    builds no topic column (the same string a record, written into every Arrow batch by the JVM and made a
    Python object again here; without it a task's rows and their digest took 0.04-0.2 s less a million
    records, its whole path about 3.3 s)."""
    columns = batch.to_pydict()
    headers = columns["headers"] if "headers" in columns else itertools.repeat(None, batch.num_rows)
    topics = columns["topic"] if "topic" in columns else itertools.repeat(topic, batch.num_rows)
    return zip(topics, columns["key"], columns["value"], headers, strict=True)
