"""The runtime image's Kafka support: the connector jars of images/runtime/kafka-jars.txt are in
Spark's jar directory, and Spark inside the image reads and writes the test bed's broker with
them (the roundtrip of tests/kafka, with no jar added: only the image's /opt/spark/jars), and
confluent-kafka (the exactly-once sink's client) is installed. The image runs in the real node's
containerd (``RealNode.run_image``, the host's network: the broker is on loopback).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from testbed import TestBed, imagestore

REPO = Path(__file__).resolve().parents[2]
RUNTIME = imagestore.runtime_image()
RECORDS = 200


def listed_jars() -> set[str]:
    lines = (REPO / "images" / "runtime" / "kafka-jars.txt").read_text().splitlines()
    coordinates = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return {f"{c.split(':')[1]}-{c.split(':')[2]}.jar" for c in coordinates}


def test_runtime_image_has_the_listed_kafka_jars_and_confluent_kafka(testbed: TestBed) -> None:
    assert testbed.node is not None
    result = testbed.node.run_image(RUNTIME, ["sh", "-c", "ls $SPARK_HOME/jars; python3 -c 'import confluent_kafka, importlib.metadata as m; "
                                              "print(\"confluent-kafka\", m.version(\"confluent-kafka\"))'"])
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert listed_jars() <= set(lines), sorted(set(lines) & {j for j in lines if "kafka" in j or "pool" in j})
    assert lines[-1] == "confluent-kafka 2.16.1", lines[-1]  # images/constraints.txt


def test_spark_in_the_runtime_image_reads_and_writes_kafka(kafka_broker, testbed: TestBed, tmp_path: Path) -> None:
    assert testbed.node is not None
    source = kafka_broker.create_topic(f"image-in-{uuid.uuid4().hex[:6]}", partitions=2)
    target = kafka_broker.create_topic(f"image-out-{uuid.uuid4().hex[:6]}", partitions=2)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    scratch.chmod(0o777)
    mounts = ((str(REPO / "tests" / "kafka"), "/kafka", True), (str(scratch), "/tmp", False))
    # STREAMJOB_JARS_DIR names no directory: the job adds no jar, Spark has only the image's own
    env = {"STREAMJOB_JARS_DIR": "/nonexistent", "SPARK_LOCAL_IP": "127.0.0.1"}
    result = testbed.node.run_image(RUNTIME, ["python3", "/kafka/kafka_roundtrip_job.py", kafka_broker.bootstrap, source, target,
                                              "/tmp/checkpoint", str(RECORDS)], env=env, mounts=mounts, timeout=480)
    assert result.returncode == 0, f"exit {result.returncode}:\n{result.stderr[-4000:]}"
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"spark": "4.3.0", "batch": list(range(RECORDS)), "streamed": RECORDS}
    assert written(kafka_broker.bootstrap, target) == RECORDS  # read by librdkafka, outside the image


def written(bootstrap: str, topic: str) -> int:
    """Records in `topic` (high minus low watermark of each partition), as a client outside the image sees them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex[:8]}"})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in partitions]
        return sum(high - low for low, high in marks)
    finally:
        consumer.close()
