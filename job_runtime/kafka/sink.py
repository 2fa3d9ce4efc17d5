"""The Kafka sink: exactly-once by a Kafka transaction per micro-batch, or Spark's at-least-once writer.

Called by job_runtime.query.pipeline.sink_writer for `sink.kind: kafka`. The
exactly-once path is a two-phase commit over Spark's micro-batch protocol
(docs/delivery.md):

1. Spark writes batch N's offsets to the offset log, then runs the batch;
   `ExactlyOnceKafkaWriter` gets its rows through foreachBatch.
2. The writer asks Kafka for its marker: the offset its consumer group
   `streamjob-sink.<namespace>.<name>` (one per job, whatever its checkpoint)
   committed on partition 0 of the sink topic. The offset is "last published
   batch + 1"; its metadata string names that batch by its id and by a digest
   of its input (the source offsets Spark logged for it and for the batch
   before it, `offsets/N` and `offsets/N-1`). When the marker names batch N
   with the digest of this run's batch N, the batch is a re-run of one whose
   transaction committed: the driver died, or a stop-with-savepoint ended the
   query, between the Kafka commit and Spark's commit log entry, in this
   checkpoint or in the one a savepoint was taken from. Nothing is sent.
3. Otherwise it sends the rows and the marker in one transaction
   (send_offsets_to_transaction) and commits it: the rows and the marker
   become visible together, or not at all.
4. Spark then writes batch N to its commit log.

Why the input digest and not the checkpoint: a savepoint carries the batch
that was planned but not committed (its offsets, `offsets/N`), and a job
restored from it re-runs that batch in a new checkpoint with the same batch id
and the same offsets. A marker per checkpoint started empty there and published
the batch a second time. The digest recognises the same batch in any checkpoint
of the job's lineage, and tells it apart from a batch with the same id but
other input (a restore from an older savepoint replays what followed it, as
Flink does).

The producer's transactional id is `streamjob.<namespace>.<name>`: stable
across restarts, so a new driver's init_transactions fences the old one and
aborts its open transaction; unique per job, so two jobs never fence each
other. init_transactions runs when the query is built, before Spark plans
anything from the offset log (job_runtime.kafka.writers.kafka_writer), and after the driver took its
epoch on the checkpoint (job_runtime.checkpoints.epoch), which the writer checks
before a transaction begins and again before it commits. Rows are produced by
the driver (one producer, one transaction per batch, a bounded producer queue).
Broker and topic are named in every error.

No batch is too big (job_runtime.kafka.budget): the job's Kafka sources plan at
most the batch cap (derived from transactionTimeoutMs), a batch planned over it
and never published is planned again at start (job_runtime.kafka.replan), and a
transaction that ran out of time halves the cap for its checkpoint.

The broker expires the group's offsets `offsets.retention.minutes` after the last
commit (the group has no members): the marker has a copy in the checkpoint, written
around each Kafka commit and read when the group has none (job_runtime.kafka.marker_copy).

A marker *ahead* of the batch (naming a later batch, or this batch with other
input) means a publish would repeat what the job published already: an error
(KafkaSinkError naming both batches), never a publish. The one exception is a
replay the user asked for: a start that restored an explicit --restore-from
records the marker's batch then (`<checkpoint>/_streamjob_replay.json`), and
batches up to it publish again (as Flink replays from an older savepoint),
also after a restart of that checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from job_runtime import testhooks
from job_runtime.kafka import auth as kafka_auth
from job_runtime.kafka import budget
from job_runtime.kafka.driver_rows import rows_by_partition
from job_runtime.kafka.marker_copy import DurableMarker
from job_runtime.kafka.marker import KafkaSinkError, Marker, batch_input_digest, publish_decision
from job_runtime.kafka.replan import planned_batch, read_offset_log, replan_planned_batch
from job_runtime.kafka.send import init_transactions, produce
from streamjob_contract.jobdef import KafkaProducers, KafkaSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamjob_contract.s3 import Store

log = logging.getLogger("job_runtime.kafka_sink")

MARKER_PARTITION = 0
MARKER_TIMEOUT = 120.0  # seconds to wait out a moving or loading group coordinator
RETRIABLE_COORDINATOR = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
REPLAY_FILE = "_streamjob_replay.json"  # in the checkpoint: the batch up to which an explicit restore replays
QUEUE_MESSAGES = 50_000  # the producer's queue, in records and in KiB: what the driver holds beyond its partitions
QUEUE_KBYTES = 32_768


class Fence(Protocol):
    """This driver's epoch on its checkpoint (job_runtime.checkpoints.epoch.Fence; kafka and checkpoints are
    layers side by side, so the sink names what it uses)."""

    @property
    def store(self) -> "Store": ...

    def check(self, where: str) -> None: ...


@dataclass(frozen=True)
class SinkIdentity:
    """Which job (and which of its checkpoints) a sink writes for."""

    namespace: str
    name: str
    checkpoint: str
    fence: "Fence | None" = None  # this driver's epoch on the checkpoint (job_runtime.checkpoints.epoch)
    restored: bool = False  # this start restored an explicit --restore-from: a replay may publish again
    # drop the plan of an oversized batch never published; not under a one-batch trigger (the drain), which
    # would plan the new batch without the sources' limits
    replan: bool = True

    @property
    def transactional_id(self) -> str:
        """Stable across restarts (fencing), unique per job (two jobs never fence each other)."""
        return f"streamjob.{self.namespace}.{self.name}"

    @property
    def marker_group(self) -> str:
        """Per job, not per checkpoint: a restored job must see what the job it was restored from published."""
        return f"streamjob-sink.{self.namespace}.{self.name}"


def records(df: "DataFrame", kafka: KafkaSink) -> "DataFrame":
    """`df` as the records a Kafka sink sends, one shape for the driver, the tasks and Spark's writer: a topic
    column first only with a topicColumn (a null topic becomes the sink's `topic`), key and value as binary
    (UTF-8 of the string: the value is valueColumn, or JSON of every column but the topic and headers columns;
    no key without keyColumn), and a `map<string,string>` headers column only with a headersColumn.

    Nothing that is the same for every record: without a topicColumn every record goes to the sink's `topic`,
    and a column of that string, or of null header maps, would be built, shipped as Arrow and made Python
    objects again, record by record (a column of null maps cost the hand-over three times its time without
    it: docs/benchmarks/kafka-executors-profile.md). job_runtime.kafka.send.batch_rows reads this shape."""
    from pyspark.sql import functions as F

    special = {c for c in (kafka.topic_column, kafka.headers_column) if c}  # not part of the JSON value
    named = special | {c for c in (kafka.key_column, kafka.value_column) if c}
    missing = sorted(c for c in named if c not in df.columns)
    if missing:
        raise ValueError(f"sink.kafka: no column {', '.join(repr(m) for m in missing)} (columns: {', '.join(df.columns)})")
    if kafka.value_column:
        value = F.col(kafka.value_column).cast("string")
    else:
        value = F.to_json(F.struct(*[F.col(c) for c in df.columns if c not in special]))
    topic = [F.coalesce(F.col(kafka.topic_column).cast("string"), F.lit(kafka.topic)).alias("topic")] if kafka.topic_column else []
    key = F.col(kafka.key_column).cast("string") if kafka.key_column else F.lit(None).cast("string")
    headers = [F.col(kafka.headers_column).alias("headers")] if kafka.headers_column else []
    return df.select(*topic, key.cast("binary").alias("key"), value.cast("binary").alias("value"), *headers)


class ExactlyOnceKafkaWriter:
    """foreachBatch target: batch N in one Kafka transaction with its marker, skipped when already committed."""

    def __init__(self, kafka: KafkaSink, identity: SinkIdentity) -> None:
        self.kafka = kafka
        self.transactional_id = identity.transactional_id
        self.group = identity.marker_group
        self.checkpoint = identity.checkpoint
        self.fence = identity.fence
        self.restored = identity.restored
        self.replan = identity.replan
        self._producer: Any = None
        self._marker_consumer: Any = None
        self._replay_until: int | None = None
        self._replay = ""  # the explicit restore whose replay is under way (REPLAY_FILE), "" for none
        self._offsets_read: tuple[int, str] | None = None  # the last offsets/N this writer read: N's digest needs N-1's
        self._copy = DurableMarker(self.fence.store if self.fence is not None else None, self.group, self.restored)  # outlives the group

    def _where(self) -> str:
        return f"brokers {self.kafka.bootstrap_servers} topic {self.kafka.topic}"

    def _client_conf(self) -> dict[str, Any]:
        # SASL credentials from the driver's environment (job_runtime.kafka.auth), never logged
        return {"bootstrap.servers": self.kafka.bootstrap_servers, **kafka_auth.client_conf(self.kafka.sasl, "sink", "sink.kafka")}

    def _ensure_clients(self) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer

        if self._producer is not None:
            return
        timeout = self.kafka.transaction_timeout_ms / 1000
        producer = Producer({
            **self._client_conf(),
            "transactional.id": self.transactional_id,
            "transaction.timeout.ms": self.kafka.transaction_timeout_ms,
            "enable.idempotence": True,
            "linger.ms": 5,
            # a bounded queue: produce() waits for deliveries instead of holding the batch in memory
            "queue.buffering.max.messages": QUEUE_MESSAGES,
            "queue.buffering.max.kbytes": QUEUE_KBYTES,
        })
        try:
            # fences an earlier driver of this job and aborts its open transaction
            init_transactions(producer, self.kafka.topic, max(timeout, 30.0))
        except KafkaException as err:
            raise KafkaSinkError(f"sink.kafka ({self._where()}): cannot start transactions: {err.args[0]}") from None
        self._producer = producer
        self._marker_consumer = Consumer({
            **self._client_conf(), "group.id": self.group, "enable.auto.commit": False, "isolation.level": "read_committed",
        })
        log.info("started transactional producer transactionalId=%s markerGroup=%s", self.transactional_id, self.group)

    def start(self, spark: Any = None) -> None:
        """Before the query plans: fence the previous driver's producer, learn the replay an explicit restore
        allows, and drop the plan of a batch over the cap that was never published (job_runtime.kafka.replan)."""
        self._ensure_clients()
        self._offsets_read = None  # a replan at this start may write the planned batch's offsets again
        self._copy.reconcile(self.marker())  # the previous driver's transaction is settled now (init_transactions)
        store = self.fence.store if self.fence is not None else None
        published = self.published_until() if self.restored or (spark is not None and self.replan) else None
        if self.restored:
            self._replay_until = published
            self._replay = uuid.uuid4().hex[:16]
            if store is not None:
                store.write_bytes(REPLAY_FILE, json.dumps({"untilBatch": self._replay_until, "replay": self._replay}).encode())
            log.info("allowed replay after an explicit restore untilBatch=%s checkpoint=%s", self._replay_until, self.checkpoint)
        elif store is not None and store.exists(REPLAY_FILE):
            noted = json.loads(store.read_bytes(REPLAY_FILE))
            until = noted.get("untilBatch")
            self._replay_until = int(until) if until is not None else None
            self._replay = str(noted.get("replay", ""))
        if spark is not None and self.replan:
            replan_planned_batch(spark, self.checkpoint, self.cap(), published)

    def published_until(self) -> int | None:
        """The latest batch any of whose records the job published (the marker's)."""
        last = self.marker()
        return last.batch_id if last is not None else None

    def cap(self) -> int:
        """The records a batch may hold (job_runtime.kafka.budget); its Kafka sources plan at most this."""
        return batch_cap(self.kafka, self.fence.store if self.fence is not None else None)

    def marker(self) -> Marker | None:
        """The last batch whose transaction committed, or None."""
        from confluent_kafka import KafkaException, TopicPartition

        deadline = time.monotonic() + MARKER_TIMEOUT
        while True:
            try:
                committed = self._marker_consumer.committed([TopicPartition(self.kafka.topic, MARKER_PARTITION)], timeout=30)
                break
            except KafkaException as err:
                # the group coordinator moves or loads (a fresh broker, a restart): retriable
                if not err.args[0].retriable() and err.args[0].code() not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                    raise KafkaSinkError(f"sink.kafka ({self._where()}): cannot read the committed-batch marker: {err.args[0]}") from None
                log.info("retrying the committed-batch marker read reason=%s", err.args[0].name())
                time.sleep(0.5)
        return Marker.parse(*self._copy.resolve(committed[0].offset, committed[0].metadata))  # the copy when expired

    def input_digest(self, batch: "DataFrame", batch_id: int) -> str:
        spark = batch.sparkSession
        current = read_offset_log(spark, self.checkpoint, batch_id)
        if current is None:
            raise KafkaSinkError(f"sink.kafka ({self._where()}): batch {batch_id} has no offsets/{batch_id} in {self.checkpoint}")
        seen = self._offsets_read
        if batch_id == 0:
            previous = None
        elif seen is not None and seen[0] == batch_id - 1:
            previous = seen[1]  # written before batch N-1 ran, never again while this query runs: one read a batch
        else:
            previous = read_offset_log(spark, self.checkpoint, batch_id - 1)
        self._offsets_read = (batch_id, current)
        return batch_input_digest(current, previous)

    def __call__(self, batch: "DataFrame", batch_id: int) -> None:
        began = time.monotonic()
        self._ensure_clients()
        self._check_fence(f"batch {batch_id}, before its Kafka transaction")
        digest = self.input_digest(batch, batch_id)
        last = self.marker()
        try:
            decision = publish_decision(last, batch_id, digest, self._replay_until)
        except KafkaSinkError as err:
            raise KafkaSinkError(f"{err} ({self._where()})") from None
        if decision == "skip":
            # still run the batch, unpublished: its state stores must commit (Spark checks it)
            batch.write.format("noop").mode("overwrite").save()
            log.info("skipped batch batchId=%s reason=already committed to Kafka (marker %s)", batch_id, last and last.metadata())
            return
        if decision == "replay":
            log.warning(
                "publishing batch batchId=%s although the marker names batch %s: an explicit restore from an older "
                "savepoint replays what followed it (up to batch %s)", batch_id, last and last.batch_id, self._replay_until,
            )
        self._publish(batch, batch_id, digest, last, time.monotonic() - began)

    def _publish(self, batch: "DataFrame", batch_id: int, digest: str, last: Marker | None, prepared: float) -> None:
        """Batch `batch_id`'s records and its marker in one transaction of the driver (`prepared`: the seconds
        the fence check, the input digest and the marker read took before it, for the log)."""
        from confluent_kafka import KafkaException, TopicPartition

        producer = self._producer
        rows = records(batch, self.kafka)
        count = 0
        opened = time.monotonic()
        try:
            producer.begin_transaction()
            # partition after partition, each freed once sent: the driver holds at most two of a capped batch
            with closing(rows_by_partition(rows, self.kafka.topic)) as sent:  # closed early: the fetch ahead cancelled
                for topic, key, value, headers in sent:
                    produce(producer, topic, key, value, headers)
                    count += 1
            sent_at = time.monotonic()
            marker = [TopicPartition(self.kafka.topic, MARKER_PARTITION, batch_id + 1, Marker(batch_id, digest).metadata())]
            timeout = self.kafka.transaction_timeout_ms / 1000  # the broker aborts it then anyway
            producer.send_offsets_to_transaction(marker, self._marker_consumer.consumer_group_metadata(), timeout)
            testhooks.reached("kafka-before-commit")
            self._check_fence(f"batch {batch_id}, before its Kafka commit")
            self._copy.record_pending(last, Marker(batch_id, digest))
            producer.commit_transaction(timeout)
            self._copy.record_committed(Marker(batch_id, digest))
        except KafkaException as err:
            self._abort()
            self._note_if_out_of_time(batch, batch_id, count, time.monotonic() - opened)
            raise KafkaSinkError(f"sink.kafka ({self._where()}): batch {batch_id} not published: {err.args[0]}") from None
        except BaseException:
            self._abort()
            raise
        # where a batch's time in the sink went: before the transaction, the records, the commit (with the marker)
        log.info("committed batch batchId=%s records=%d transactionalId=%s prepareMs=%d sendMs=%d commitMs=%d",
                 batch_id, count, self.transactional_id, prepared * 1000, (sent_at - opened) * 1000,
                 (time.monotonic() - sent_at) * 1000)
        testhooks.reached("kafka-after-commit")

    def _note_if_out_of_time(self, batch: "DataFrame", batch_id: int, sent: int, open_seconds: float) -> None:
        """A transaction that failed after most of its timeout ran out of time: halve the cap for this
        checkpoint, so the next start plans the batch again smaller (never replayed for ever)."""
        store = self.fence.store if self.fence is not None else None
        if store is None or not budget.ran_out_of_time(open_seconds, self.kafka.transaction_timeout_ms):
            return
        planned = planned_batch(batch.sparkSession, self.checkpoint)
        held = planned.records if planned is not None and planned.batch_id == batch_id else None
        cap = budget.halved_cap(held, sent, self.cap())
        store.write_bytes(budget.CAP_NOTE, budget.format_note(cap, batch_id), content_type="application/json")
        log.warning("lowered the batch cap maxRecords=%d batchId=%s records=%s openSeconds=%.1f reason=the transaction "
                    "ran out of time (transactionTimeoutMs=%d); the next start plans the batch again",
                    cap, batch_id, held, open_seconds, self.kafka.transaction_timeout_ms)

    def _check_fence(self, where: str) -> None:
        if self.fence is not None:
            self.fence.check(where)  # FencedError: the transaction is aborted, nothing is published

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(30)
        except Exception as err:  # the next driver's init_transactions aborts it anyway
            log.warning("could not abort the open transaction transactionalId=%s error=%s", self.transactional_id, err)


def batch_cap(kafka: KafkaSink, store: "Store | None") -> int:
    """The records one exactly-once batch may hold: the transaction budget, lowered by a note in the
    checkpoint after a transaction ran out of time (job_runtime.kafka.budget)."""
    noted = None
    if store is not None and store.exists(budget.CAP_NOTE):
        noted = budget.parse_note(store.read_bytes(budget.CAP_NOTE))
    return budget.batch_cap(kafka.transaction_timeout_ms, noted, executors=kafka.producers == KafkaProducers.executors)
