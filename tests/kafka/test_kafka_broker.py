"""The test bed's Kafka broker: a real KRaft node on loopback, topics through the admin API, transactions."""

from __future__ import annotations

import uuid

import pytest
from kafka_io import consume_all


def test_broker_is_a_single_kraft_node_on_loopback(kafka_broker) -> None:
    host, _, port = kafka_broker.bootstrap.rpartition(":")
    assert host == "127.0.0.1" and int(port) > 0
    metadata = kafka_broker.admin().list_topics(timeout=10)
    assert [b.host for b in metadata.brokers.values()] == ["127.0.0.1"]
    properties = (kafka_broker.log_path.parent / "server.properties").read_text()
    assert "process.roles=broker,controller" in properties and "zookeeper" not in properties


def test_topics_are_created_through_the_admin_api_and_transactions_commit_and_abort(kafka_broker) -> None:
    from confluent_kafka import Producer

    topic = kafka_broker.create_topic(f"bed-{uuid.uuid4().hex[:6]}", partitions=3)
    assert kafka_broker.admin().list_topics(topic, timeout=10).topics[topic].partitions.keys() == {0, 1, 2}
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"bed-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(30)
    assert [m.value() for m in consume_all(kafka_broker.bootstrap, topic)] == [b"committed"]
    assert sorted(m.value() for m in consume_all(kafka_broker.bootstrap, topic, isolation="read_uncommitted")) == [b"aborted", b"committed"]


def test_a_pending_transactional_offset_commit_holds_a_read_committed_offset_fetch(kafka_broker) -> None:
    """Why the task marker checks after a kill read with read_uncommitted: a producer killed between
    `send_offsets_to_transaction` and its commit leaves the group's offset pending, and a read_committed
    consumer's offset fetch (`require_stable`, KIP-447) waits on it until the transaction ends, which it
    does only when the broker's timeout aborts it or a producer of the same id is initialised (what the
    runtime does before it reads a marker). read_uncommitted returns the last committed offset at once."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    topic = kafka_broker.create_topic(f"pending-{uuid.uuid4().hex[:6]}", partitions=1)
    group = f"group-{topic}"
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"bed-{topic}",
                         "transaction.timeout.ms": 120000})
    producer.init_transactions(30)
    member = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    for offset in (5, 9):  # the first committed, the second left pending (the kill)
        producer.begin_transaction()
        producer.produce(topic, b"x")
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset, f"marker {offset}")], member.consumer_group_metadata(), 30)
        producer.flush(30)
        if offset == 5:
            producer.commit_transaction(30)
    member.close()

    def fetch(isolation: str) -> TopicPartition:
        consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group, "isolation.level": isolation})
        try:
            return consumer.committed([TopicPartition(topic, 0)], timeout=5)[0]
        finally:
            consumer.close()

    settled = fetch("read_uncommitted")
    assert (settled.offset, settled.metadata) == (5, "marker 5")
    with pytest.raises(KafkaException) as held:  # a read_committed fetch while the commit is pending
        fetch("read_committed")
    assert held.value.args[0].name() == "_TIMED_OUT", held.value
    producer.abort_transaction(30)
    assert fetch("read_committed").offset == 5
