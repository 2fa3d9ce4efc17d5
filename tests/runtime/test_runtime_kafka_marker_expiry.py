"""The exactly-once Kafka sink's marker outlives the broker's expiry of consumer-group offsets.

The sink keeps its marker (last published batch, input digest) in the committed offsets of the
group ``streamjob-sink.<namespace>.<name>``; the group has no members, so the broker deletes those
offsets ``offsets.retention.minutes`` after the commit (7 days by default). This module's own broker
expires them after a minute (the minimum), checked every second.

The scenario of issue 24 section 5: batch 1 committed to Kafka, the driver killed before Spark's
commit log entry; a savepoint of that checkpoint carries batch 1, planned; the job is down until
the group's offsets are gone; a job restored from the savepoint re-runs batch 1 and must recognise
it as published: every window exactly once (read back as a read_committed consumer, against
runtime_kafka.reference_windows).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pause_points import PausePoint
from runtime_harness import RuntimeProcess
from runtime_kafka import EVENTS, committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics

from job_runtime.savepoints import write_savepoint

NAME = "kafka-expiry"
GROUP = f"streamjob-sink.tests.{NAME}"  # run_args' namespace is "tests"
AFTER_COMMIT = PausePoint("kafka-after-commit:2", "batch 1 committed to Kafka, not to Spark's commit log")


@pytest.fixture(scope="module")
def expiring_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from testbed import locate
    from testbed.kafka import start_kafka

    broker = start_kafka(
        locate.kafka_dir(), tmp_path_factory.mktemp("kafka-expiry"), timeout=180,
        settings={"offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "1000"},
    )
    yield broker
    broker.stop()


def group_offset(bootstrap: str, topic: str) -> int | None:
    """The offset the sink's marker group committed on partition 0 of ``topic``; None when it has none."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        offset = consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
        return offset if offset >= 0 else None
    finally:
        consumer.close()


def test_a_batch_published_before_the_marker_expired_is_not_published_again(
    expiring_broker: Any, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    broker = expiring_broker
    gen = load_events_module()
    source, target = topics(broker)
    events = gen.generate(EVENTS)
    gen.produce(broker.bootstrap, source, events)
    expected = reference_windows(events)
    job = kafka_job(broker, source, target, tmp_path / "job.json")
    ckpt, ckpt2, savepoint = tmp_path / "ckpt", tmp_path / "ckpt2", tmp_path / "savepoint"

    first = start_run(processes, tmp_path, job, ckpt, name=NAME, label="after-commit", point=AFTER_COMMIT)
    first.wait_paused(tmp_path / "pauses")
    first.kill()
    assert (ckpt / "offsets" / "1").exists() and not (ckpt / "commits" / "1").exists()
    assert group_offset(broker.bootstrap, target) == 2, "the marker names batch 1 (offset = batch + 1)"
    write_savepoint(ckpt.as_uri(), savepoint.as_uri(), job_name=NAME, job_namespace="tests",
                    job_hash="", spark_version=pyspark.__version__)

    # the job stays down until the broker expired the group's offsets
    deadline = time.monotonic() + 300
    while group_offset(broker.bootstrap, target) is not None:
        assert time.monotonic() < deadline, "the broker never expired the marker group's offsets"
        time.sleep(2)

    second = start_run(processes, tmp_path, job, ckpt2, name=NAME, label="restored",
                       extra=("--restore-from", savepoint.as_uri()))
    assert second.wait(400) == 0, second.log_tail()
    assert committed_windows(broker.bootstrap, target, sum(expected.values())) == expected
