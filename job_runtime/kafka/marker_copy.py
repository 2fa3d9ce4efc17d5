"""The Kafka sink's durable marker copy: the last published batch, kept in the checkpoint as well.

Called by job_runtime.kafka.sink (``ExactlyOnceKafkaWriter``): ``resolve`` where it reads
the marker, ``record_pending`` and ``record_committed`` around its Kafka commit,
``reconcile`` at start. It copies the group's offset and metadata string as they are
(the sink's ``Marker`` parses both), so it never imports the sink.

Why: the sink's marker (the last published batch and its input digest) lives in the
committed offsets of the consumer group ``streamjob-sink.<namespace>.<name>``. The group
has no members, so the broker expires those offsets ``offsets.retention.minutes`` after
the last commit (7 days by default). A job resumed after that from a checkpoint or
savepoint whose planned batch was already published found no marker and published the
batch again. The copy is a file of the checkpoint's content, ``COPY_FILE``, so every
savepoint carries it (checkpoint.include_in_snapshot keeps it) and a restore puts it into
the new checkpoint.

The file: ``{"group": ..., "committed": <offset>|null, "pending": <offset>|null}``, each
offset ``{"offset": <batch + 1>, "metadata": <the marker's metadata string>}``.
Its protocol, for a published batch N (marker M):

1. before the Kafka commit: ``committed`` = the marker read for N, ``pending`` = M;
2. Kafka commits N's rows with M in the group, atomically;
3. after the Kafka commit: ``committed`` = M, ``pending`` = null;
4. Spark writes ``commits/N``.

So at every instant, whatever is killed where: the copy's ``committed`` is at most what
Kafka committed, and when it is less, ``pending`` names the one batch that may have
committed. The group, while its offsets live, is the truth: ``resolve`` returns it and
reads the copy only when the group has no offset. Then a ``pending`` batch is known
published when Spark committed it (``commits/<N>`` in this checkpoint: Spark writes it
only after the sink returned); otherwise nobody can tell (a kill between steps 1 and 3,
and the group expired before any driver of the checkpoint started again, because
``reconcile`` at each start settles the copy from the group). That one case raises
``MarkerUnknownError`` naming the batch: never a silent publish (docs/delivery.md).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from streamjob_contract.s3 import Store

log = logging.getLogger("job_runtime.kafka_sink")

COPY_FILE = "streamjob-kafka-marker.json"  # checkpoint content (not "_streamjob_"): savepoints carry it


class Published(Protocol):
    """A marker as the sink has it (job_runtime.kafka.sink.Marker): the batch and the group's metadata string."""

    @property
    def batch_id(self) -> int: ...

    def metadata(self) -> str: ...


class MarkerUnknownError(RuntimeError):
    """The group's marker expired and the copy cannot tell whether a batch was published."""


@dataclass(frozen=True)
class Offset:
    """A committed offset of the marker group as the sink writes it: last published batch + 1, and its metadata."""

    offset: int
    metadata: str

    @property
    def batch_id(self) -> int:
        return self.offset - 1

    @classmethod
    def of(cls, marker: Published | None) -> "Offset | None":
        return cls(marker.batch_id + 1, marker.metadata()) if marker is not None else None


@dataclass(frozen=True)
class MarkerCopy:
    """What the copy file says: the group it copies, the last offset known committed, one that may be."""

    group: str
    committed: Offset | None
    pending: Offset | None = None

    def to_bytes(self) -> bytes:
        def one(o: Offset | None) -> dict[str, Any] | None:
            return {"offset": o.offset, "metadata": o.metadata} if o is not None else None

        return json.dumps({"group": self.group, "committed": one(self.committed), "pending": one(self.pending)}).encode()

    @classmethod
    def parse(cls, data: bytes) -> "MarkerCopy":
        body = json.loads(data)

        def one(value: Any) -> Offset | None:
            return Offset(int(value["offset"]), str(value["metadata"])) if value else None

        return cls(str(body["group"]), one(body.get("committed")), one(body.get("pending")))


def fallback(copy: MarkerCopy | None, group: str, pending_in_commit_log: bool, replaying_before_pending: bool = False) -> Offset | None:
    """Pure: the marker when the group has no committed offset, from the copy.

    No copy, or a copy of another job's group (a savepoint restored by another job): None,
    as the group says. A pending batch Spark committed (``pending_in_commit_log``) was
    published. A restore whose checkpoint never planned the pending batch
    (``replaying_before_pending``: a savepoint taken while that batch's transaction was
    open) replays from the savepoint anyway: the batch known published is its marker.
    Otherwise a pending batch may or may not have been published: ``MarkerUnknownError``."""
    if copy is None or copy.group != group:
        return None
    if copy.pending is None:
        return copy.committed
    if pending_in_commit_log:
        return copy.pending
    if replaying_before_pending:
        return copy.committed
    raise MarkerUnknownError(
        f"sink.kafka: the marker of consumer group {group} is gone (expired after the broker's "
        f"offsets.retention.minutes), and its copy in the checkpoint ({COPY_FILE}) cannot tell whether batch "
        f"{copy.pending.batch_id} was published: a driver stopped between its Kafka commit and the copy's update, and "
        f"no driver started on this checkpoint before the group expired. The last batch known published is "
        f"{copy.committed.batch_id if copy.committed else 'none'}. Nothing was published. To go on, decide: remove "
        f"\"pending\" from {COPY_FILE} to publish batch {copy.pending.batch_id} (twice, if it had been), or make it "
        "\"committed\" to skip it (lost, if it had not been) (docs/delivery.md, \"Long-lived edges\")"
    )


class DurableMarker:
    """The copy file in one checkpoint (``store``), for one marker group. Inert without a store."""

    def __init__(self, store: "Store | None", group: str, restoring: bool = False) -> None:
        self.store = store
        self.group = group
        self.restoring = restoring  # this start restored a savepoint: it replays from there (job_runtime.kafka.sink)

    def read(self) -> MarkerCopy | None:
        if self.store is None or not self.store.exists(COPY_FILE):
            return None
        return MarkerCopy.parse(self.store.read_bytes(COPY_FILE))

    def resolve(self, offset: int | None, metadata: str | None) -> tuple[int | None, str | None]:
        """The group's committed offset when it has one; else what the copy proves (see ``fallback``)."""
        if (offset is not None and offset >= 0) or self.store is None:
            return offset, metadata
        copy = self.read()
        pending = copy.pending.batch_id if copy is not None and copy.pending is not None else None
        done = pending is not None and self.store.exists(f"commits/{pending}")
        before = pending is not None and self.restoring and not self.store.exists(f"offsets/{pending}")
        found = fallback(copy, self.group, done, before)
        if found is None:
            return offset, metadata
        log.warning("read the committed-batch marker from its copy markerGroup=%s batchId=%s reason=the group has "
                    "no committed offset (expired)", self.group, found.batch_id)
        return found.offset, found.metadata

    def reconcile(self, marker: Published | None) -> None:
        """At start, after init_transactions settled the previous driver's transaction: the copy says ``marker``."""
        wanted = Offset.of(marker)
        if self.store is None or wanted is None or self.read() == MarkerCopy(self.group, wanted):
            return
        self.store.write_bytes(COPY_FILE, MarkerCopy(self.group, wanted).to_bytes(), content_type="application/json")
        log.info("updated the committed-batch marker copy markerGroup=%s batchId=%s", self.group, wanted.batch_id)

    def record_pending(self, last: Published | None, publishing: Published) -> None:
        """Before the Kafka commit (raises: the transaction is aborted, nothing is published)."""
        if self.store is not None:
            copy = MarkerCopy(self.group, Offset.of(last), Offset.of(publishing))
            self.store.write_bytes(COPY_FILE, copy.to_bytes(), content_type="application/json")

    def record_committed(self, published: Published) -> None:
        """After the Kafka commit. A failure only leaves ``pending``: settled by the group, or by commits/N."""
        if self.store is None:
            return
        try:
            copy = MarkerCopy(self.group, Offset.of(published))
            self.store.write_bytes(COPY_FILE, copy.to_bytes(), content_type="application/json")
        except Exception as err:
            log.warning("could not update the committed-batch marker copy markerGroup=%s batchId=%s error=%s",
                        self.group, published.batch_id, err)
