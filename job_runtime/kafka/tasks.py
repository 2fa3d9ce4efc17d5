"""Executors producing an exactly-once batch: the per-task names, markers and decisions. Pure.

Called by job_runtime.kafka.task_publish (each task of a batch, on an executor) and by
job_runtime.kafka.sink_tasks (the driver, before and after the tasks). With
`sink.kafka.producers: executors`, task p of batch N sends its partition's records in
a Kafka transaction of its own, under the transactional id `streamjob.<ns>.<name>/p<p>`,
and commits with them a *task marker*: the offset N+1 of the job's marker group on
partition p of the topic `streamjob-markers.<ns>.<name>`, which nothing ever writes
to (the broker keeps a group's offsets for any existing partition). Its metadata names
the batch by id and input digest (as the batch marker does, job_runtime.kafka.marker)
and the task's records by an order-independent digest and a count.

A re-run of batch N (a task retried, an executor lost, the driver restarted) reads the
task's marker after `init_transactions` on the task's id, which fenced every earlier
attempt and aborted its open transaction: a marker naming N with the same input means
this partition was published; its records are compared by digest and the task sends
nothing. Different records mean the query did not give the task the same rows again:
the task refuses, naming the partition, and sends nothing (docs/delivery.md).

A partition too slow to send in one transaction goes in several (job_runtime.kafka.task_chunks):
each record has a bucket (the top 16 bits of its hash, so a record's bucket does not depend
on the order the query gives it in), a chunk is a range of buckets, and each chunk's
transaction commits a *partial* marker: the records of every bucket below `upto` are
published, `rows` and `n` cover those. A re-run of the batch finds a partial marker: it
checks the records below `upto` as above and sends the rest (`resume`).

`/` in the id: Kubernetes names cannot hold it, so a job named `x.p1` never shares
an id with task 1 of job `x`.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from job_runtime.kafka.marker import KafkaSinkError

MAX_TOPIC = 249  # Kafka's limit on a topic name
_MOD = 1 << 128
BUCKET_BITS = 16
BUCKETS = 1 << BUCKET_BITS  # a partial marker's `upto` is in [0, BUCKETS); BUCKETS means every record


def task_transactional_id(driver_id: str, partition: int) -> str:
    """The transactional id of task `partition` of every batch: `<driver id>/p<partition>`."""
    return f"{driver_id}/p{partition}"


def marker_topic(namespace: str, name: str) -> str:
    """The topic whose partitions carry the task markers: `streamjob-markers.<namespace>.<name>`,
    shortened with a digest when it would pass Kafka's 249 characters."""
    topic = f"streamjob-markers.{namespace}.{name}"
    if len(topic) <= MAX_TOPIC:
        return topic
    tail = hashlib.sha256(topic.encode()).hexdigest()[:16]
    return f"{topic[:MAX_TOPIC - 17]}.{tail}"


class RowDigest:
    """An order-independent digest of a task's records: the sum of their 128-bit hashes mod 2^128,
    and their count. The same records in any order give the same digest; a record more, less or
    changed gives another (with probability 2^-128)."""

    def __init__(self, total: int = 0, count: int = 0) -> None:
        self._sum = total % _MOD
        self.count = count

    @classmethod
    def parse(cls, hex_total: str, count: int) -> "RowDigest":
        """A digest as a task reported it (`hex`, `count`)."""
        return cls(int(hex_total, 16), count)

    def add(self, topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | str | None]] | None) -> int:
        """Adds one record; returns its hash (its bucket: `bucket`)."""
        hashed = record_hash(topic, key, value, headers)
        self._sum += hashed  # reduced mod 2^128 when read: a few bits more per doubling of the count
        self.count += 1
        return hashed

    def add_hash(self, hashed: int) -> None:
        self._sum += hashed
        self.count += 1

    @property
    def total(self) -> int:
        return self._sum % _MOD

    def plus(self, other: "RowDigest") -> "RowDigest":
        """The digest of both sets of records."""
        return RowDigest(self.total + other.total, self.count + other.count)

    @property
    def hex(self) -> str:
        return f"{self.total:032x}"


def record_hash(topic: str, key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | str | None]] | None) -> int:
    """A record's 128-bit hash: every field length-prefixed (-1 for none), headers by name, hashed in one
    call (the per-record cost of every task's publish; the bytes hashed are those every earlier version hashed).
    The usual record (a key, a value, no headers) takes a path of one join: 1.3 against 2.3 us a record."""
    if key is not None and value is not None and not headers:
        prefix = _topic_fields.get(topic) or _topic_field(topic)
        return _from_bytes(_blake2b(b"".join((prefix, _length(len(key)), key, _length(len(value)), value)), digest_size=16).digest(), "big")
    parts: list[bytes] = []
    _field(parts, topic.encode())
    _field(parts, key)
    _field(parts, value)
    if headers:
        for name, header in sorted(headers, key=lambda kv: kv[0]):
            _field(parts, name.encode())
            _field(parts, header.encode() if isinstance(header, str) else header)
    return int.from_bytes(_blake2b(b"".join(parts), digest_size=16).digest(), "big")


def _topic_field(topic: str) -> bytes:
    """A topic's length-prefixed name, kept for the first TOPIC_FIELDS topics seen (a sink writes a few)."""
    encoded = topic.encode()
    field = _length(len(encoded)) + encoded
    if len(_topic_fields) < TOPIC_FIELDS:
        _topic_fields[topic] = field
    return field


def bucket(hashed: int) -> int:
    """A record's bucket, from its hash: which chunk of a partition sent in several transactions holds it."""
    return hashed >> (128 - BUCKET_BITS)


_NONE = struct.pack(">i", -1)
_blake2b = hashlib.blake2b
_length = struct.Struct(">i").pack
_from_bytes = int.from_bytes
_topic_fields: dict[str, bytes] = {}  # topic -> its length-prefixed name (_topic_field)
TOPIC_FIELDS = 64


def _field(parts: list[bytes], part: bytes | None) -> None:
    if part is None:
        parts.append(_NONE)
    else:
        parts.append(_length(len(part)))
        parts.append(part)


@dataclass(frozen=True)
class TaskMarker:
    """What task p committed last: the batch (id and input digest) and its records (digest, count); a
    partial marker (`upto` < BUCKETS) covers only the records whose bucket is below `upto`."""

    batch_id: int
    input: str
    rows: str
    count: int
    replay: str = ""  # the explicit restore whose replay published it ("" for none): see task_decision
    upto: int = BUCKETS

    @property
    def complete(self) -> bool:
        return self.upto >= BUCKETS

    def metadata(self) -> str:
        body: dict[str, object] = {"batch": self.batch_id, "input": self.input, "rows": self.rows, "n": self.count}
        if self.replay:
            body["replay"] = self.replay
        if not self.complete:
            body["upto"] = self.upto
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, offset: int | None, metadata: str | None) -> "TaskMarker | None":
        if offset is None or offset < 0:
            return None
        try:
            body = json.loads(metadata or "")
            upto = int(body.get("upto", BUCKETS))
            if not 0 <= upto <= BUCKETS:
                raise ValueError(upto)
            return cls(int(body["batch"]), str(body["input"]), str(body["rows"]), int(body["n"]), str(body.get("replay", "")), upto)
        except (ValueError, KeyError, TypeError):
            return cls(offset - 1, "", "", -1)  # unreadable: matches no batch, so it is never taken as published


TaskDecision = Literal["publish", "check", "resume", "replay"]


def task_decision(marker: TaskMarker | None, partition: int, batch_id: int, input_digest: str,
                  replay_until: int | None, replay: str = "") -> TaskDecision:
    """Pure: what task `partition` does with its share of batch `batch_id` (input `input_digest`).

    publish: its marker is behind. check: its marker names this batch with this input, so the
    partition was published: compare the records (`check_rows`) and send nothing. resume: the same,
    but the marker is partial: compare the records it covers, send the rest. replay: the
    marker is ahead but within an explicit restore's replay (`replay_until`, the restore's token
    `replay`). Ahead otherwise: KafkaSinkError.

    Within a replay, a marker naming this very batch was written either before the restore (the
    replay publishes it again, as Flink does from an older savepoint) or by this replay, which a
    driver or task then lost (published once already: check). The token tells them apart; a
    partition empty in later batches keeps such an old marker."""
    in_replay = replay_until is not None and batch_id <= replay_until
    if marker is None or marker.batch_id < batch_id:
        return "publish"
    if marker.batch_id == batch_id and marker.input == input_digest and not (in_replay and marker.replay != replay):
        return "check" if marker.complete else "resume"
    if in_replay:
        return "replay"
    raise KafkaSinkError(
        f"sink.kafka: batch {batch_id} partition {partition} not published: task {partition} already published batch "
        f"{marker.batch_id}{' with other input' if marker.batch_id == batch_id else ''} (its marker is ahead of this "
        "batch); publishing would repeat output. Another driver wrote past this checkpoint, or the checkpoint went back; "
        "only an explicit restore from a savepoint replays (docs/delivery.md)"
    )


def check_rows(marker: TaskMarker, partition: int, batch_id: int, rows: RowDigest) -> None:
    """A re-run of a published partition must hold the same records (those of the buckets below a partial
    marker's `upto`: `rows` is their digest); raises KafkaSinkError when not."""
    if marker.rows == rows.hex and marker.count == rows.count:
        return
    raise KafkaSinkError(
        f"sink.kafka: batch {batch_id} partition {partition} not published again: the re-run holds other records than the "
        f"run that published it ({rows.count} records against {marker.count}, digests differ). The query is not "
        "deterministic per partition (for example rand(), uuid(), coalesce() or a changed static table), which "
        "sink.kafka.producers: executors needs; use producers: driver (docs/delivery.md)"
    )


def published_until(batch_marker_id: int | None, task_markers: Iterable[TaskMarker | None]) -> int | None:
    """The latest batch any part of which was published: the batch marker's, or a task marker's one
    beyond it (a batch whose tasks committed before the driver's own commit)."""
    ids = [m.batch_id for m in task_markers if m is not None]
    if batch_marker_id is not None:
        ids.append(batch_marker_id)
    return max(ids, default=None)


def stray_partitions(markers: Sequence[TaskMarker | None], partitions: int, batch_id: int, input_digest: str) -> list[int]:
    """Partitions at or past `partitions` whose marker names this batch with this input: a run of the
    batch that had more tasks published them, so this run's rows per task cannot match."""
    return [p for p in range(partitions, len(markers))
            if (m := markers[p]) is not None and m.batch_id == batch_id and m.input == input_digest]
