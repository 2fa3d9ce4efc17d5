"""The exactly-once Kafka sink's `topicColumn`, both producers: each record goes to the topic its row names,
a row naming none to the sink's `topic`, each exactly once for a read_committed consumer.

With the executors producing, a sink without `topicColumn` hands its tasks no topic column (they take the
sink's topic from their plan: job_runtime.kafka.sink_tasks); with one, the column goes to the tasks. This
runs the second path end to end (the first is every other executors test).
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from runtime_kafka import start_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import produce_backlog  # noqa: E402

RECORDS = 3_000


def routed_job(broker: Any, source: str, even: str, odd: str, fallback: str, path: Path, producers: str) -> Path:
    """Even keys to `even`, odd keys to `odd`, every third key (a null topic) to the sink's `fallback` topic."""
    route = f"CASE WHEN CAST(CAST(key AS STRING) AS INT) % 3 = 0 THEN NULL WHEN CAST(CAST(key AS STRING) AS INT) % 2 = 0 THEN '{even}' ELSE '{odd}' END"
    job = {"pipeline": {
        "sources": [{"name": "events", "kind": "kafka", "options": {
            "kafka.bootstrap.servers": broker.bootstrap, "subscribe": source, "startingOffsets": "earliest"}}],
        "transforms": [{"name": "out", "sql": f"SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS v, {route} AS t FROM events"}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": broker.bootstrap, "topic": fallback, "keyColumn": "id",
                                            "valueColumn": "v", "topicColumn": "t", "producers": producers}},
    }}
    path.write_text(json.dumps(job))
    return path


def keys_by_topic(bootstrap: str, topics: list[str], expected: int) -> Counter[tuple[str, int]]:
    """(topic, key) -> copies seen by a read_committed consumer, read until `expected` records or 10 s idle."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe(topics)
    seen: Counter[tuple[str, int]] = Counter()
    idle = 0
    try:
        while sum(seen.values()) < expected and idle < 20:
            msg = consumer.poll(0.5)
            if msg is None:
                idle += 1
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            idle = 0
            seen[(msg.topic(), int(msg.key()))] += 1
        consumer.poll(2.0)  # one more look: a record beyond the expected count is a duplicate
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("producers", ["driver", "executors"])
def test_each_record_goes_once_to_the_topic_its_row_names_or_to_the_sinks_topic(kafka_broker, processes, tmp_path: Path,
                                                                                  producers: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    source = kafka_broker.create_topic(f"routed-{suffix}", partitions=2)
    even, odd, fallback = (kafka_broker.create_topic(f"{name}-{suffix}") for name in ("even", "odd", "fallback"))
    produce_backlog(kafka_broker.bootstrap, source, RECORDS)
    job = routed_job(kafka_broker, source, even, odd, fallback, tmp_path / "job.json", producers)

    run = start_run(processes, tmp_path, job, tmp_path / "ckpt", name="routed", label=producers)
    assert run.wait(300) == 0, run.log_tail()

    seen = keys_by_topic(kafka_broker.bootstrap, [even, odd, fallback], RECORDS)
    expected = Counter({(fallback if k % 3 == 0 else even if k % 2 == 0 else odd, k): 1 for k in range(RECORDS)})
    assert seen == expected, (sum(seen.values()), sorted(set(seen) ^ set(expected))[:10], [k for k, n in seen.items() if n > 1][:10])
