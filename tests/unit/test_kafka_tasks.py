"""The per-task rules of the exactly-once Kafka sink with executors producing (job_runtime.kafka.tasks)."""

from __future__ import annotations

import random

import pytest

from job_runtime.kafka.marker import KafkaSinkError
from job_runtime.kafka.tasks import (
    MAX_TOPIC, RowDigest, TaskMarker, check_rows, marker_topic, published_until, stray_partitions, task_decision,
    task_transactional_id,
)

RECORDS = [("out", f"k{i}".encode(), f'{{"n":{i}}}'.encode(), [("h", "v"), ("a", b"b")] if i % 3 == 0 else None) for i in range(50)]


def digest_of(rows: list[tuple[str, bytes | None, bytes | None, list[tuple[str, str | bytes]] | None]]) -> RowDigest:
    digest = RowDigest()
    for row in rows:
        digest.add(*row)
    return digest


def test_the_row_digest_ignores_order_and_header_order_and_sees_every_change() -> None:
    base = digest_of(RECORDS)
    shuffled = RECORDS[:]
    random.Random(7).shuffle(shuffled)
    assert digest_of(shuffled).hex == base.hex and digest_of(shuffled).count == 50
    headers_swapped = [(t, k, v, list(reversed(h)) if h else h) for t, k, v, h in RECORDS]
    assert digest_of(headers_swapped).hex == base.hex
    changes = [
        RECORDS[:-1],                                      # one record less
        RECORDS + [RECORDS[0]],                            # one record twice
        [("other", *RECORDS[0][1:])] + RECORDS[1:],         # another topic
        [(RECORDS[0][0], None, *RECORDS[0][2:])] + RECORDS[1:],  # a key gone
        [(RECORDS[0][0], RECORDS[0][1], b"", RECORDS[0][3])] + RECORDS[1:],  # an empty value is not a null one
        [(*RECORDS[0][:3], [("h", "w"), ("a", b"b")])] + RECORDS[1:],  # a header value
    ]
    assert len({digest_of(c).hex for c in changes} | {base.hex}) == len(changes) + 1
    # fields do not run into each other: ("ab", "c") is not ("a", "bc")
    assert digest_of([("t", b"ab", b"c", None)]).hex != digest_of([("t", b"a", b"bc", None)]).hex


def test_the_row_digest_is_the_one_markers_already_hold() -> None:
    # computed by the first release of the digest (hashlib, a field at a time): a marker a task
    # committed before an upgrade must still match its re-run after it
    rows = [("out", b"k1", b"v1", None), ("out", None, b"", [("b", "x"), ("a", b"y"), ("c", None)]), ("t2", b"", None, [])]
    assert (digest_of(rows).hex, digest_of(rows).count) == ("6f6eee146167c8dc8eea912cea516746", 3)  # type: ignore[arg-type]


def test_task_ids_never_collide_across_jobs_and_marker_topics_fit_kafka() -> None:
    assert task_transactional_id("streamjob.ns.x", 1) == "streamjob.ns.x/p1"
    # a job named "x.p1" and task 1 of job "x": Kubernetes names hold no "/"
    assert task_transactional_id("streamjob.ns.x.p1", 0) != task_transactional_id("streamjob.ns.x", 1)
    assert marker_topic("payments", "orders") == "streamjob-markers.payments.orders"
    long_a, long_b = marker_topic("n" * 63, "a" * 253), marker_topic("n" * 63, "a" * 252 + "b")
    assert len(long_a) <= MAX_TOPIC and len(long_b) <= MAX_TOPIC and long_a != long_b


def test_the_task_marker_round_trips_and_an_unreadable_one_matches_no_batch() -> None:
    marker = TaskMarker(7, "abc", "f" * 32, 12)
    assert TaskMarker.parse(8, marker.metadata()) == marker
    replayed = TaskMarker(7, "abc", "f" * 32, 12, "r1")
    assert TaskMarker.parse(8, replayed.metadata()) == replayed
    assert len(TaskMarker(10**12, "a" * 32, "b" * 32, 10**9, "c" * 16).metadata()) < 4096  # offset.metadata.max.bytes
    assert TaskMarker.parse(None, None) is None and TaskMarker.parse(-1, "") is None
    partial = TaskMarker(7, "abc", "f" * 32, 5, "", 1234)
    assert '"upto":1234' in partial.metadata() and TaskMarker.parse(8, partial.metadata()) == partial and not partial.complete
    assert '"upto"' not in marker.metadata() and marker.complete  # a complete marker reads as every earlier version wrote it
    assert TaskMarker.parse(8, marker.metadata()[:-1] + ',"upto":70000}').input == ""  # past BUCKETS: unreadable
    odd = TaskMarker.parse(8, "not json")
    assert odd is not None and odd.batch_id == 7 and task_decision(odd, 0, 8, "abc", None) == "publish"
    with pytest.raises(KafkaSinkError):  # never taken as "published" for its own batch: refused, not skipped
        task_decision(odd, 0, 7, "abc", None)


@pytest.mark.parametrize(("marker", "batch", "replay_until", "replay", "expected"), [
    (None, 5, None, "", "publish"),
    (TaskMarker(4, "d4", "r", 1), 5, None, "", "publish"),               # behind
    (TaskMarker(5, "d5", "r", 1), 5, None, "", "check"),                 # this batch, this input: published
    (TaskMarker(9, "d9", "r", 1), 5, 9, "t2", "replay"),                 # ahead, inside a replay
    (TaskMarker(5, "d5", "r", 1), 5, 9, "t2", "replay"),                 # published before the restore: again
    (TaskMarker(5, "d5", "r", 1, "t1"), 5, 9, "t2", "replay"),           # by an earlier restore's replay: again
    (TaskMarker(5, "d5", "r", 1, "t2"), 5, 9, "t2", "check"),            # by this replay, then lost: once
    (TaskMarker(5, "d5", "r", 1), 12, 9, "t2", "publish"),               # past the replay, behind
    (TaskMarker(5, "d5", "r", 1, "", 100), 5, None, "", "resume"),       # some chunks of this batch: the rest
    (TaskMarker(5, "d5", "r", 1, "t2", 100), 5, 9, "t2", "resume"),      # chunks of this replay, then lost
    (TaskMarker(5, "d5", "r", 1, "t1", 100), 5, 9, "t2", "replay"),      # chunks before the restore: all again
    (TaskMarker(4, "d4", "r", 1, "", 100), 5, None, "", "publish"),      # an earlier batch's chunks: behind
])
def test_task_decisions(marker: TaskMarker | None, batch: int, replay_until: int | None, replay: str, expected: str) -> None:
    assert task_decision(marker, 3, batch, f"d{batch}", replay_until, replay) == expected


@pytest.mark.parametrize("marker", [TaskMarker(6, "d6", "r", 1), TaskMarker(5, "other", "r", 1)])
def test_a_task_marker_ahead_refuses_naming_the_partition_and_both_batches(marker: TaskMarker) -> None:
    with pytest.raises(KafkaSinkError, match=r"batch 5 partition 3 not published: task 3 already published batch") as err:
        task_decision(marker, 3, 5, "d5", None)
    assert "other input" in str(err.value) if marker.batch_id == 5 else "other input" not in str(err.value)
    with pytest.raises(KafkaSinkError):
        task_decision(marker, 3, 5, "d5", 4, "t")  # a replay up to batch 4 does not cover batch 5


def test_a_re_run_with_other_records_is_refused_naming_the_partition() -> None:
    published = digest_of(RECORDS)
    marker = TaskMarker(5, "d5", published.hex, published.count)
    check_rows(marker, 2, 5, digest_of(list(reversed(RECORDS))))  # same records: passes
    with pytest.raises(KafkaSinkError, match=r"batch 5 partition 2 not published again.*49 records against 50.*deterministic"):
        check_rows(marker, 2, 5, digest_of(RECORDS[1:]))


def test_published_until_is_the_latest_batch_any_part_of_which_was_published() -> None:
    assert published_until(None, []) is None
    assert published_until(4, [None, TaskMarker(3, "", "", 0)]) == 4
    assert published_until(4, [TaskMarker(5, "", "", 0), None]) == 5  # tasks of batch 5 committed, the batch marker did not
    assert published_until(None, [TaskMarker(2, "", "", 0)]) == 2


def test_stray_partitions_are_the_ones_past_this_runs_tasks_that_published_this_batch() -> None:
    markers = [TaskMarker(5, "d5", "", 1), None, TaskMarker(5, "d5", "", 1), TaskMarker(4, "d4", "", 1), TaskMarker(5, "x", "", 1)]
    assert stray_partitions(markers, 2, 5, "d5") == [2]
    assert stray_partitions(markers, 5, 5, "d5") == []


def test_a_tasks_refusal_is_told_without_sparks_wrapping() -> None:
    from job_runtime.kafka.sink_tasks import task_error

    wrapped = RuntimeError("An exception was thrown from the Python worker.\nTraceback (most recent call last):\n  File ...\n"
                           "job_runtime.kafka.marker.KafkaSinkError: sink.kafka: batch 5 partition 2 not published again: x\n\tat org...")
    assert task_error(wrapped) == "sink.kafka: batch 5 partition 2 not published again: x"
    assert task_error(RuntimeError("Job aborted\\nmore")) == "Job aborted\\nmore"
    assert task_error(RuntimeError("")) == "RuntimeError"


def test_a_task_reads_headers_only_when_the_batch_carries_them() -> None:
    import pyarrow as pa

    from job_runtime.kafka.send import batch_rows

    plain = pa.RecordBatch.from_pydict({"topic": ["out", "out"], "key": [b"k0", None], "value": [b"v0", b"v1"]})
    with_headers = plain.append_column("headers", pa.array([[("h", "x")], None], pa.map_(pa.string(), pa.string())))
    assert list(batch_rows(plain, "out")) == [("out", b"k0", b"v0", None), ("out", None, b"v1", None)]
    assert list(batch_rows(with_headers, "out"))[0] == ("out", b"k0", b"v0", [("h", "x")])
    # a batch without the column digests as one with null headers: markers written before stay valid
    nulls = plain.append_column("headers", pa.array([None, None], pa.map_(pa.string(), pa.string())))
    assert digest_of(list(batch_rows(plain, "out"))).hex == digest_of(list(batch_rows(nulls, "out"))).hex


def test_a_task_takes_the_sinks_topic_when_the_batch_carries_no_topic_column() -> None:
    import pyarrow as pa

    from job_runtime.kafka.send import batch_rows

    with_topic = pa.RecordBatch.from_pydict({"topic": ["out", "out"], "key": [b"k0", None], "value": [b"v0", b"v1"]})
    without = with_topic.drop_columns(["topic"])
    assert list(batch_rows(without, "out")) == list(batch_rows(with_topic, "other")) == [("out", b"k0", b"v0", None), ("out", None, b"v1", None)]
    # the same records hash the same either way: markers written with the column stay valid
    assert digest_of(list(batch_rows(without, "out"))).hex == digest_of(list(batch_rows(with_topic, "other"))).hex
    assert digest_of(list(batch_rows(without, "other"))).hex != digest_of(list(batch_rows(with_topic, "other"))).hex


def test_a_tasks_plan_unpickles_in_a_python_worker_without_the_job_models(tmp_path) -> None:
    """Each Python worker of the executors unpickles the batch's plan: the job definition's pydantic models
    cost it about 0.2 s of CPU and 12 MB, so the plan carries plain values (TaskSink, SaslClient)."""
    import functools
    import subprocess
    import sys

    from pyspark import cloudpickle

    from job_runtime.checkpoints.epoch import EpochCheck
    from job_runtime.kafka.task_publish import TaskPlan, TaskSink, publish_partition
    from streamjob_contract.jobdef import KafkaSink

    kafka = KafkaSink.model_validate({"bootstrapServers": "127.0.0.1:9092", "topic": "out",
                                      "sasl": {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "creds"}}})
    plan = TaskPlan(TaskSink.of(kafka), "streamjob.ns.job", "group", "markers", 3, "digest", epoch=EpochCheck("file:///tmp/x", 1, None))
    pickled = tmp_path / "plan.pkl"
    pickled.write_bytes(cloudpickle.dumps(functools.partial(publish_partition, plan)))
    script = ("import pickle, sys; body = pickle.loads(open(sys.argv[1], 'rb').read()); "
              "print(body.args[0].kafka.sasl.mechanism, body.args[0].kafka.transaction_timeout_ms, "
              "sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'yaml') or m == 'streamjob_contract.jobdef'))")
    done = subprocess.run([sys.executable, "-c", script, str(pickled)], capture_output=True, text=True, check=True)
    assert done.stdout.split(None, 2) == ["SCRAM-SHA-512", "60000", "[]\n"]


def test_the_record_hash_is_the_length_prefixed_layout_on_every_path() -> None:
    """record_hash's path for a record with a key, a value and no headers hashes the bytes the general path does:
    every field length-prefixed (big-endian int32, -1 for none), headers sorted by name."""
    import hashlib
    import struct

    from job_runtime.kafka.tasks import record_hash

    def field(part: bytes | None) -> bytes:
        return struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part

    def reference(topic: str, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | str | None]] | None) -> int:
        data = field(topic.encode()) + field(key) + field(value)
        for name, header in sorted(headers or [], key=lambda kv: kv[0]):
            data += field(name.encode()) + field(header.encode() if isinstance(header, str) else header)
        return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")

    rnd = random.Random(11)
    for i in range(300):
        topic = rnd.choice(["out", "t\u00fcpic", "x" * 249, f"many-{i}"])  # more topics than the prefix cache keeps
        key = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 40))])
        value = rnd.choice([None, b"", rnd.randbytes(rnd.randint(1, 300))])
        headers = rnd.choice([None, [], [("h", b"1"), ("a", "s"), ("n", None)]])
        assert record_hash(topic, key, value, headers) == reference(topic, key, value, headers), (topic, key, value, headers)
