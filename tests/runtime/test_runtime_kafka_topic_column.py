"""A Kafka sink's `topicColumn`, on every path: each record goes to the topic its row names, a row naming
none to the sink's `topic`; exactly once for a read_committed consumer with either producer, at least once
(and, on this clean run, once) with Spark's writer.

Without `topicColumn` no topic column is built at all (job_runtime.kafka.sink.records): the driver and the
tasks take the sink's topic. With one, the column decides; Spark's writer must then not be given its "topic"
option, which would send every row to the sink's topic whatever the column says.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runtime_kafka import start_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import produce_backlog, read_to_end  # noqa: E402

RECORDS = 3_000


def routed_job(broker: Any, source: str, even: str, odd: str, fallback: str, path: Path, delivery: str, producers: str) -> Path:
    """Even keys to `even`, odd keys to `odd`, every third key (a null topic) to the sink's `fallback` topic."""
    route = f"CASE WHEN CAST(CAST(key AS STRING) AS INT) % 3 = 0 THEN NULL WHEN CAST(CAST(key AS STRING) AS INT) % 2 = 0 THEN '{even}' ELSE '{odd}' END"
    job = {"pipeline": {
        "sources": [{"name": "events", "kind": "kafka", "options": {
            "kafka.bootstrap.servers": broker.bootstrap, "subscribe": source, "startingOffsets": "earliest"}}],
        "transforms": [{"name": "out", "sql": f"SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS v, {route} AS t FROM events"}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": broker.bootstrap, "topic": fallback, "keyColumn": "id",
                                            "valueColumn": "v", "topicColumn": "t", "delivery": delivery,
                                            "producers": producers}},
    }}
    path.write_text(json.dumps(job))
    return path


def keys_by_topic(bootstrap: str, topics: list[str], *, timeout: float = 120.0) -> Counter[tuple[str, int]]:
    """(topic, key) -> copies a read_committed consumer sees, read to the end of every partition of `topics`
    (the job has exited: everything it committed is there), so a late duplicate is counted too."""
    seen: Counter[tuple[str, int]] = Counter()

    def count(msg: Any) -> None:
        seen[(msg.topic(), int(msg.key()))] += 1

    assert read_to_end(bootstrap, topics, count, timeout=timeout), \
        f"not at the end of {sorted(set(topics))} after {timeout} s ({sum(seen.values())} read)"
    return seen


@pytest.mark.parametrize(("delivery", "producers"), [("exactlyOnce", "driver"), ("exactlyOnce", "executors"),
                                                     ("atLeastOnce", "driver")])
def test_each_record_goes_to_the_topic_its_row_names_or_to_the_sinks_topic(kafka_broker, processes, tmp_path: Path,
                                                                            delivery: str, producers: str) -> None:
    suffix = uuid.uuid4().hex[:6]
    source = kafka_broker.create_topic(f"routed-{suffix}", partitions=2)
    even, odd, fallback = (kafka_broker.create_topic(f"{name}-{suffix}") for name in ("even", "odd", "fallback"))
    produce_backlog(kafka_broker.bootstrap, source, RECORDS)
    job = routed_job(kafka_broker, source, even, odd, fallback, tmp_path / "job.json", delivery, producers)

    run = start_run(processes, tmp_path, job, tmp_path / "ckpt", name="routed", label=f"{delivery}-{producers}")
    assert run.wait(300) == 0, run.log_tail()

    seen = keys_by_topic(kafka_broker.bootstrap, [even, odd, fallback])
    expected = Counter({(fallback if k % 3 == 0 else even if k % 2 == 0 else odd, k): 1 for k in range(RECORDS)})
    assert seen == expected, (sum(seen.values()), sorted(set(seen) ^ set(expected))[:10], [k for k, n in seen.items() if n > 1][:10])
