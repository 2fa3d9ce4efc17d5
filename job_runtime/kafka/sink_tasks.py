"""The exactly-once Kafka sink with executors producing (`sink.kafka.producers: executors`): the driver's part.

Called by job_runtime.kafka.writers.kafka_writer. The batch-level protocol is the driver
sink's (job_runtime.kafka.sink: the batch marker, its durable copy, the fence checks,
the replay of an explicit restore); what changes is who sends the records. For batch N:

1. as the driver sink: skip a batch the batch marker names, refuse one it is ahead of;
2. make sure the marker topic `streamjob-markers.<ns>.<name>` has a partition per task
   (created, or grown, with the broker's defaults; refused naming it when that fails),
   read every task marker and refuse, before anything is sent, a batch some task of
   which is ahead, or that an earlier run published with more tasks;
3. one Spark job: every task publishes its partition in a transaction of its own with
   its task marker (or, when one transaction would run out of time, in chunks, each with a
   partial marker: job_runtime.kafka.task_chunks), or checks that a partition already
   published holds the same records (job_runtime.kafka.task_publish, job_runtime.kafka.tasks);
4. the driver checks its epoch and commits the batch marker in its own transaction, as
   the driver sink does after its records.

At start, before anything is read: every task id the marker topic has a partition for
is initialised once (`init_transactions`, in parallel): tasks of a replaced driver are
fenced and their open transactions aborted, so the markers read next are settled and
`read_committed` readers are not held back by them.
"""

from __future__ import annotations

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from job_runtime import testhooks
from job_runtime.kafka.marker import KafkaSinkError, Marker
from job_runtime.kafka.send import init_transactions
from job_runtime.kafka.sink import ExactlyOnceKafkaWriter, SinkIdentity, records
from job_runtime.kafka.task_publish import RESULT_SCHEMA, TaskPlan, TaskSink, digest_partition, publish_partition
from job_runtime.kafka.tasks import RowDigest, TaskMarker, check_rows, marker_topic, published_until, stray_partitions, task_decision, task_transactional_id
from streamjob_contract.jobdef import KafkaSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("job_runtime.kafka_sink")

FENCE_THREADS = 8
ADMIN_TIMEOUT = 60.0


class ExecutorsKafkaWriter(ExactlyOnceKafkaWriter):
    """foreachBatch target: each task of batch N publishes its partition once; the driver commits the batch marker."""

    def __init__(self, kafka: KafkaSink, identity: SinkIdentity) -> None:
        super().__init__(kafka, identity)
        self.marker_topic = marker_topic(identity.namespace, identity.name)
        self._marker_partitions: int | None = None  # the marker topic's partition count, once known
        portable = getattr(identity.fence, "portable", None)  # job_runtime.checkpoints.epoch.Fence.portable
        self._epoch = portable() if portable is not None else None

    def start(self, spark: Any = None) -> None:
        self._ensure_clients()
        self.fence_tasks()
        super().start(spark)

    def fence_tasks(self) -> None:
        """Initialise every task id the marker topic has a partition for: earlier tasks fenced, their transactions aborted."""
        count = self.marker_partitions()
        if not count:
            return
        started = time.monotonic()
        with ThreadPoolExecutor(min(FENCE_THREADS, count)) as pool:
            list(pool.map(self._fence_one, range(count)))
        log.info("fenced the task producers of earlier drivers partitions=%d seconds=%.1f", count, time.monotonic() - started)

    def _fence_one(self, partition: int) -> None:
        from confluent_kafka import KafkaException, Producer

        tid = task_transactional_id(self.transactional_id, partition)
        producer = Producer({**self._client_conf(), "transactional.id": tid,
                             "transaction.timeout.ms": self.kafka.transaction_timeout_ms})
        try:
            init_transactions(producer, self.kafka.topic, max(self.kafka.transaction_timeout_ms / 1000, 30.0))
        except KafkaException as err:
            raise KafkaSinkError(f"sink.kafka ({self._where()}): cannot fence task {partition} ({tid}): {err.args[0]}") from None
        finally:
            producer.flush(0)

    def published_until(self) -> int | None:
        """The latest batch any task or the batch marker published: what an explicit restore replays up to,
        and what a re-plan of an oversized batch must not pass (a batch some task published is kept)."""
        last = self.marker()
        return published_until(last.batch_id if last is not None else None, self.task_markers())

    def marker_partitions(self, refresh: bool = False) -> int:
        """The marker topic's partitions; 0 when it does not exist."""
        if self._marker_partitions is not None and not refresh:
            return self._marker_partitions
        metadata = self._marker_consumer.list_topics(self.marker_topic, timeout=ADMIN_TIMEOUT)
        topic = metadata.topics.get(self.marker_topic)
        self._marker_partitions = len(topic.partitions) if topic is not None and topic.error is None else 0
        return self._marker_partitions

    def ensure_marker_partitions(self, needed: int) -> None:
        """A partition of the marker topic for each of `needed` tasks: created or grown, or KafkaSinkError naming it."""
        if self.marker_partitions() >= needed:
            return
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient(self._client_conf())
        have = self.marker_partitions(refresh=True)
        try:
            if have == 0:
                futures = admin.create_topics([NewTopic(self.marker_topic, num_partitions=needed)], request_timeout=ADMIN_TIMEOUT)
            elif have < needed:
                futures = admin.create_partitions([NewPartitions(self.marker_topic, needed)], request_timeout=ADMIN_TIMEOUT)
            else:
                return
            for future in futures.values():
                future.result(ADMIN_TIMEOUT)
        except KafkaException as err:
            if err.args[0].name() not in ("TOPIC_ALREADY_EXISTS", "INVALID_PARTITIONS") or self.marker_partitions(refresh=True) < needed:
                raise KafkaSinkError(
                    f"sink.kafka ({self._where()}): the task marker topic {self.marker_topic} needs {needed} partitions "
                    f"(it has {have}) and could not get them: {err.args[0]}. Create it, or grant the job CREATE and ALTER "
                    "on it (docs/delivery.md)") from None
        deadline = time.monotonic() + ADMIN_TIMEOUT
        while self.marker_partitions(refresh=True) < needed:  # the metadata of a new topic spreads to the brokers
            if time.monotonic() > deadline:
                raise KafkaSinkError(f"sink.kafka ({self._where()}): the task marker topic {self.marker_topic} did not show "
                                     f"{needed} partitions within {ADMIN_TIMEOUT:g}s")
            time.sleep(0.2)
        log.info("task marker topic ready topic=%s partitions=%d", self.marker_topic, needed)

    def task_markers(self) -> list[TaskMarker | None]:
        """Every task marker, by partition of the marker topic (settled: read_committed)."""
        from confluent_kafka import KafkaException, TopicPartition

        count = self.marker_partitions()
        if not count:
            return []
        try:
            found = self._marker_consumer.committed([TopicPartition(self.marker_topic, p) for p in range(count)], timeout=60)
        except KafkaException as err:
            raise KafkaSinkError(f"sink.kafka ({self._where()}): cannot read the task markers of {self.marker_topic}: {err.args[0]}") from None
        return [TaskMarker.parse(tp.offset, tp.metadata) for tp in found]

    def _publish(self, batch: "DataFrame", batch_id: int, digest: str, last: Marker | None, prepared: float) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        rows = records(batch, self.kafka)
        tasks = rows.rdd.getNumPartitions()
        self.ensure_marker_partitions(max(tasks, 1))
        markers = self.task_markers()
        published = self._precheck(markers, tasks, batch_id, digest)  # partition -> `upto` of its marker
        plan = TaskPlan(TaskSink.of(self.kafka), self.transactional_id, self.group, self.marker_topic, batch_id, digest,
                        self._replay_until, self._replay, self._epoch)
        started = time.monotonic()
        if published:
            rows = rows.persist()  # the check and the publish see one execution of the batch
        try:
            if published:
                self._check_published(rows, {p: markers[p] for p in published}, batch_id)
            results = rows.mapInArrow(functools.partial(publish_partition, plan), RESULT_SCHEMA).collect()
        except KafkaSinkError:
            raise
        except Exception as err:
            raise KafkaSinkError(f"sink.kafka ({self._where()}): batch {batch_id} not published: {task_error(err)}") from None
        finally:
            if published:
                rows.unpersist()
        statuses = [r["status"] for r in results]
        sent = sum(r["records"] for r in results if r["status"] in ("published", "chunked"))
        testhooks.reached("kafka-before-commit")  # the batch marker's transaction: tasks published, not it
        self._check_fence(f"batch {batch_id}, before its batch marker")
        timeout = self.kafka.transaction_timeout_ms / 1000
        # the durable copy covers the batch marker, as in the driver's sink: pending just before its commit (the
        # task markers are the group's; a copy pending through the tasks would read as an expired group at restart)
        self._copy.record_pending(last, Marker(batch_id, digest))
        try:
            self._producer.begin_transaction()
            marker = [TopicPartition(self.kafka.topic, 0, batch_id + 1, Marker(batch_id, digest).metadata())]
            self._producer.send_offsets_to_transaction(marker, self._marker_consumer.consumer_group_metadata(), timeout)
            self._producer.commit_transaction(timeout)
        except KafkaException as err:
            self._abort()
            raise KafkaSinkError(f"sink.kafka ({self._where()}): batch {batch_id}: its tasks published, its batch marker "
                                 f"did not commit: {err.args[0]}") from None
        self._copy.record_committed(Marker(batch_id, digest))
        log.info("committed batch batchId=%s records=%d tasks=%d published=%d skipped=%d empty=%d seconds=%.1f chunked=%d "
                 "prepareMs=%d", batch_id, sent, tasks, statuses.count("published"), statuses.count("skipped"),
                 statuses.count("empty"), time.monotonic() - started, statuses.count("chunked"), prepared * 1000)
        testhooks.reached("kafka-after-commit")

    def _check_published(self, rows: "DataFrame", published: dict[int, TaskMarker | None], batch_id: int) -> None:
        """A re-run of a batch some tasks published (some in part: a partial marker): every partition's records
        hashed first (nothing sent), and the batch refused, before any task sends, when a published partition's
        records changed. Without it a query that is not deterministic could publish elsewhere records the
        changed partition had sent."""
        bounds = {p: marker.upto for p, marker in published.items() if marker is not None and not marker.complete}
        found = {r["partition"]: r for r in rows.mapInArrow(functools.partial(digest_partition, bounds, self.kafka.topic), RESULT_SCHEMA).collect()}
        for p, marker in sorted(published.items()):
            assert marker is not None
            got = RowDigest.parse(found[p]["rows"], found[p]["records"])
            try:
                check_rows(marker, p, batch_id, got)
            except KafkaSinkError as err:
                raise KafkaSinkError(f"{err} ({self._where()}); nothing of this run was sent") from None
        log.info("re-run of a batch some tasks published: their records match batchId=%s partitions=%s", batch_id, sorted(published))

    def _precheck(self, markers: list[TaskMarker | None], tasks: int, batch_id: int, digest: str) -> list[int]:
        """Refuse before anything is sent: a task marker ahead of this batch, or partitions beyond this run's tasks
        that published this batch (an earlier run of it had more tasks: its rows per task cannot match).
        Returns the partitions already published, wholly or in part (their records are to be checked)."""
        published = []
        for p, found in enumerate(markers[:tasks]):
            try:
                if task_decision(found, p, batch_id, digest, self._replay_until, self._replay) in ("check", "resume"):
                    published.append(p)
            except KafkaSinkError as err:
                raise KafkaSinkError(f"{err} ({self._where()}, marker topic {self.marker_topic})") from None
        stray = stray_partitions(markers, tasks, batch_id, digest)
        if stray:
            raise KafkaSinkError(
                f"sink.kafka ({self._where()}): batch {batch_id} not published: an earlier run of it published partitions "
                f"{stray[:10]} and this run has {tasks} tasks; the query must give a re-run the same partitions (docs/delivery.md)")
        return published


def task_error(err: BaseException) -> str:
    """The message of the KafkaSinkError a task raised, out of Spark's wrapping; else the error's first line."""
    text = str(err)
    marker = "KafkaSinkError: "
    if marker in text:
        return text[text.rindex(marker) + len(marker):].splitlines()[0]
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__
