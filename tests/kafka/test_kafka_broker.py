"""The test bed's Kafka broker: a real KRaft node on loopback, topics through the admin API, transactions."""

from __future__ import annotations

import uuid

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
