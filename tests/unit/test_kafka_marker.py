"""The Kafka sink's committed-batch marker (job_runtime.kafka.sink): one per job, naming the
batch by the digest of its input, parsed back from a committed offset's metadata string."""

from __future__ import annotations

from job_runtime.kafka.sink import Marker, SinkIdentity, batch_input_digest

OFFSETS_4 = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"events":{"0":400}}\n'
OFFSETS_5 = 'v1\n{"batchWatermarkMs":10,"batchTimestampMs":2,"conf":{}}\n{"events":{"0":500}}\n'


def test_the_marker_group_is_per_job_not_per_checkpoint() -> None:
    one = SinkIdentity("ns", "job", "s3://bucket/ckpt-1")
    other = SinkIdentity("ns", "job", "s3://bucket/restored-ckpt")
    assert one.marker_group == other.marker_group == "streamjob-sink.ns.job"
    assert SinkIdentity("ns", "job2", "s3://bucket/ckpt-1").marker_group != one.marker_group


def test_the_digest_names_a_batch_by_its_source_offsets_only() -> None:
    digest = batch_input_digest(OFFSETS_5, OFFSETS_4)
    # the batch metadata line (timestamps, conf) is not part of it: a restore may rewrite the conf
    rewritten = OFFSETS_5.replace('"conf":{}', '"conf":{"spark.sql.shuffle.partitions":"4"}')
    assert batch_input_digest(rewritten, OFFSETS_4) == digest
    # other input, or the same end from another start, is another batch
    assert batch_input_digest(OFFSETS_5.replace("500", "501"), OFFSETS_4) != digest
    assert batch_input_digest(OFFSETS_5, OFFSETS_4.replace("400", "450")) != digest
    assert batch_input_digest(OFFSETS_5, None) != digest


def test_the_marker_round_trips_through_the_offset_metadata() -> None:
    marker = Marker(5, batch_input_digest(OFFSETS_5, OFFSETS_4))
    assert Marker.parse(6, marker.metadata()) == marker
    assert Marker.parse(None, marker.metadata()) is None and Marker.parse(-1001, "") is None


def test_a_marker_without_a_digest_matches_no_batch() -> None:
    # published again rather than lost: an offset committed without our metadata
    legacy = Marker.parse(6, "")
    assert legacy is not None and legacy.batch_id == 5
    assert legacy != Marker(5, batch_input_digest(OFFSETS_5, OFFSETS_4))


def test_a_failed_query_names_the_python_sink_error_and_the_kafka_endpoints() -> None:
    from streamjob_contract.jobdef import parse_job_definition
    from job_runtime.query.pipeline import kafka_context
    from job_runtime.query.errors import describe as _describe

    wrapped = (
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        '  File "kafka_sink.py", line 1, in __call__\n    raise KafkaSinkError(...)\n'
        "job_runtime.kafka.sink.KafkaSinkError: sink.kafka (brokers b:9092 topic out): batch 2 not published: timed out\n"
    )
    assert _describe(RuntimeError(wrapped)).startswith("job_runtime.kafka.sink.KafkaSinkError: sink.kafka (brokers b:9092")
    assert _describe(RuntimeError("plain failure\nat line 2")) == "plain failure"
    job = parse_job_definition({"pipeline": {
        "sources": [{"name": "events", "kind": "kafka", "options": {"kafka.bootstrap.servers": "b:9092", "subscribe": "in"}}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": "b:9092", "topic": "out"}},
    }})
    assert kafka_context(job, "org.apache.kafka.common.errors.TimeoutException") == (
        " (kafka source 'events': brokers b:9092 topic in; kafka sink: brokers b:9092 topic out)"
    )
    assert kafka_context(job, "division by zero") == ""


def test_a_batch_digest_reads_the_offset_log_once_when_the_writer_read_the_batch_before(monkeypatch) -> None:
    """Batch N's digest needs offsets/N and offsets/N-1: the second was read by batch N-1's digest in this
    query, and is read again only when the writer did not (its first batch, a start since)."""
    from job_runtime.kafka import sink
    from streamjob_contract.jobdef import KafkaSink

    log = {0: OFFSETS_4.replace("400", "300"), 1: OFFSETS_4, 2: OFFSETS_5}
    reads: list[int] = []

    def read_offset_log(_spark: object, _checkpoint: str, batch_id: int) -> str | None:
        reads.append(batch_id)
        return log.get(batch_id)

    monkeypatch.setattr(sink, "read_offset_log", read_offset_log)
    writer = sink.ExactlyOnceKafkaWriter(KafkaSink(bootstrapServers="b:9092", topic="out"), SinkIdentity("ns", "job", "file:///ck"))
    batch = type("Batch", (), {"sparkSession": None})()
    assert writer.input_digest(batch, 1) == batch_input_digest(OFFSETS_4, log[0])  # the writer's first batch: 1 and 0
    assert writer.input_digest(batch, 2) == batch_input_digest(OFFSETS_5, OFFSETS_4)  # 2 only
    assert reads == [1, 0, 2]
    writer._offsets_read = None  # what start() does: a replan may have written the planned batch again
    log[1] = OFFSETS_4.replace("400", "450")
    assert writer.input_digest(batch, 2) == batch_input_digest(OFFSETS_5, log[1])
    assert reads == [1, 0, 2, 2, 1]
