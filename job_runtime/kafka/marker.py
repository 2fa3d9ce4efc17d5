"""The exactly-once Kafka sink's committed-batch marker: what it holds and what it decides. Pure.

Called by job_runtime.kafka.sink (the writer reads the marker from Kafka, then asks
`publish_decision` what to do with the batch). The marker is the offset the job's
consumer group committed on partition 0 of the sink topic, in the batch's transaction:
"last published batch + 1", its metadata naming that batch by id and by the digest of
its input (docs/delivery.md).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal


class KafkaSinkError(RuntimeError):
    """The Kafka sink could not publish a batch; names the brokers and topic."""


@dataclass(frozen=True)
class Marker:
    """The last published batch: its id and the digest of its input (batch_input_digest)."""

    batch_id: int
    digest: str

    def metadata(self) -> str:
        return json.dumps({"batch": self.batch_id, "input": self.digest}, separators=(",", ":"))

    @classmethod
    def parse(cls, offset: int | None, metadata: str | None) -> "Marker | None":
        if offset is None or offset < 0:
            return None
        try:
            body = json.loads(metadata or "")
            return cls(int(body["batch"]), str(body["input"]))
        except (ValueError, KeyError, TypeError):
            return cls(offset - 1, "")  # a marker without a digest matches no batch: published again, never lost


def publish_decision(last: Marker | None, batch_id: int, digest: str, replay_until: int | None) -> Literal["skip", "publish", "replay"]:
    """Pure: what to do with batch `batch_id` (input `digest`) given the marker.

    skip: already committed to Kafka (the same batch, the same input). publish: the
    marker is behind. replay: the marker is ahead but within an explicit restore's
    replay (`replay_until`). A marker ahead otherwise raises KafkaSinkError."""
    if last is None or last.batch_id < batch_id:
        return "publish"
    if last == Marker(batch_id, digest):
        return "skip"
    if replay_until is not None and batch_id <= replay_until:
        return "replay"
    raise KafkaSinkError(
        f"sink.kafka: batch {batch_id} not published: the job already published batch {last.batch_id}"
        f"{' with other input' if last.batch_id == batch_id else ''} (the marker is ahead of this batch); publishing "
        "would repeat output. Another driver wrote past this checkpoint, or the checkpoint went back; "
        "only an explicit restore from a savepoint replays (docs/delivery.md)"
    )


def offset_lines(text: str) -> str:
    """The source offsets of an offset log entry (the lines after the version and batch metadata)."""
    return "\n".join(text.splitlines()[2:])


def batch_input_digest(current: str, previous: str | None) -> str:
    """Names a batch by its input: the source offsets it ends at and the ones it starts from."""
    h = hashlib.sha256(offset_lines(current).encode())
    h.update(b"\0" + offset_lines(previous or "").encode())
    return h.hexdigest()[:32]
