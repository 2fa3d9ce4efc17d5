"""One record into a producer's open transaction: the one send loop of the exactly-once sink.

Called by job_runtime.kafka.sink (the driver producing) and job_runtime.kafka.task_chunks
(the tasks producing, whole or in chunks). The producer's local queue is bounded
(`queue.buffering.max.messages` / `.kbytes`); when it is full, `produce` waits for
deliveries to drain instead of failing, so memory stays bounded whatever the batch.
"""

from __future__ import annotations

from typing import Any

DRAIN_SECONDS = 0.05  # one poll for delivery reports while the local queue is full


def produce(producer: Any, topic: str, key: str | bytes | None, value: str | bytes | None, headers: Any) -> None:
    """Queues one record (str is sent as UTF-8, as confluent_kafka does); `headers` a sequence of
    (name, value) pairs or None."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=list(headers) if headers else None)
            return
        except BufferError:  # the local queue is full: let deliveries drain
            producer.poll(DRAIN_SECONDS)
