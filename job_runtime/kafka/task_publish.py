"""One task of an exactly-once batch, on an executor: its partition in a Kafka transaction of its own.

Called through `mapInArrow` by job_runtime.kafka.sink_tasks (`publish_partition`, bound to
the batch's `TaskPlan`); the rules are job_runtime.kafka.tasks. Each attempt of task p:

1. an empty partition opens no client and reports `empty`;
2. `init_transactions` on `<driver id>/p<p>`: every earlier attempt of the partition (a
   retry, a speculative copy, a task of a replaced driver) is fenced and its open
   transaction aborted; then its marker is read (`read_committed`, so settled);
3. `check`: the partition was published; its records are hashed and compared, nothing is
   sent (`skipped`); `publish`/`replay`: the driver's epoch is checked, a transaction sends
   every record with the task marker (send_offsets_to_transaction), the epoch is checked
   again, and it commits (`published`). A transaction still sending after half its timeout
   is aborted and the attempt fails, naming it; Spark's retry of the task (and any attempt
   after the first) sends the partition in chunks (`chunked`, job_runtime.kafka.task_chunks).
   `resume`: an earlier attempt committed some chunks: the rest goes in chunks (`chunked`).
   The first attempt spills nothing: the chunks' cost is paid only by a partition that needs them.

Each task makes its producer and initialises it (a producer kept from an earlier task
would be fenced by any attempt of the partition on another worker since); the marker
consumer stays open in the Python worker between tasks. SASL credentials come from the executor's environment (job_runtime.kafka.auth),
never from the plan.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from job_runtime.kafka import auth as kafka_auth
from job_runtime.kafka import chunks
from job_runtime.kafka.marker import KafkaSinkError
from job_runtime.kafka.send import batch_rows, init_transactions, produce
from job_runtime.kafka.task_chunks import abort, commit_marker, publish_in_chunks, replay_token
from job_runtime.kafka.tasks import BUCKETS, RowDigest, TaskMarker, bucket, check_rows, record_hash, task_decision, task_transactional_id

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

    from streamjob_contract.jobdef import KafkaSink

log = logging.getLogger("job_runtime.kafka_sink")

RESULT_SCHEMA = "partition int, status string, records long, rows string, seconds double"
MARKER_READ_TIMEOUT = 120.0  # a loading coordinator, or an open transaction on the marker's partition
QUEUE_MESSAGES = 20_000  # about 340 bytes of librdkafka's heap a record queued: 100,000 held 27 MB more a worker
QUEUE_KBYTES = 16_384
# every task producer's settings but its brokers, credentials and transaction (benchmarks/executors_profile.py too)
PRODUCER_SETTINGS = {"enable.idempotence": True, "linger.ms": 5,
                     "queue.buffering.max.messages": QUEUE_MESSAGES, "queue.buffering.max.kbytes": QUEUE_KBYTES}


class EpochFence(Protocol):
    def check(self, where: str) -> None: ...


class EpochSource(Protocol):
    """The driver's epoch, checkable from here (job_runtime.checkpoints.epoch.EpochCheck)."""

    def fence(self) -> EpochFence: ...


@dataclass(frozen=True)
class TaskSink:
    """The sink settings a task uses, as plain values. Not the spec's `KafkaSink`: unpickling that
    in each Python worker imported pydantic and the job definition's models, about 0.2 s of CPU
    (0.8 s on a loaded machine, in every batch 0) and 12 MB a worker."""

    bootstrap_servers: str
    topic: str
    transaction_timeout_ms: int
    sasl: kafka_auth.SaslClient | None = None

    @classmethod
    def of(cls, kafka: KafkaSink) -> TaskSink:
        sasl = kafka_auth.SaslClient.of(kafka.sasl) if kafka.sasl is not None else None
        return cls(kafka.bootstrap_servers, kafka.topic, kafka.transaction_timeout_ms, sasl)


@dataclass(frozen=True)
class TaskPlan:
    """What every task of batch `batch_id` needs; pickled into the Spark job (no secret in it)."""

    kafka: TaskSink
    driver_id: str
    group: str
    marker_topic: str
    batch_id: int
    input_digest: str
    replay_until: int | None = None
    replay: str = ""
    epoch: EpochSource | None = None


# (brokers, group) -> this worker's marker consumer, kept between tasks (a consumer is never fenced)
_consumers: dict[tuple[str, str], Any] = {}


def _client_conf(kafka: TaskSink) -> dict[str, Any]:
    return {"bootstrap.servers": kafka.bootstrap_servers, **kafka_auth.client_conf(kafka.sasl, "sink", "sink.kafka")}


def _producer(plan: TaskPlan, tid: str) -> Any:
    """A producer for `tid`, initialised: every earlier attempt of the partition is fenced, its transaction
    aborted. A new one per task: a producer kept from an earlier task would be fenced by any attempt of
    the partition on another worker since, and would fail half-way through the records."""
    from confluent_kafka import Producer

    producer = Producer({
        **_client_conf(plan.kafka), "transactional.id": tid, "transaction.timeout.ms": plan.kafka.transaction_timeout_ms,
        **PRODUCER_SETTINGS,
    })
    init_transactions(producer, plan.kafka.topic, max(plan.kafka.transaction_timeout_ms / 1000, 30.0))
    return producer


def _consumer(plan: TaskPlan) -> Any:
    from confluent_kafka import Consumer

    key = (plan.kafka.bootstrap_servers, plan.group)
    if key not in _consumers:
        _consumers[key] = Consumer({**_client_conf(plan.kafka), "group.id": plan.group, "enable.auto.commit": False,
                                    "isolation.level": "read_committed"})
    return _consumers[key]


def _drop_consumer(plan: TaskPlan) -> None:
    consumer = _consumers.pop((plan.kafka.bootstrap_servers, plan.group), None)
    try:
        if consumer is not None:
            consumer.close()
    except Exception:  # closing a broken client: nothing to keep
        pass


def read_task_marker(consumer: Any, topic: str, partition: int, timeout: float = MARKER_READ_TIMEOUT) -> TaskMarker | None:
    from confluent_kafka import KafkaException, TopicPartition

    deadline = time.monotonic() + timeout
    while True:
        try:
            found = consumer.committed([TopicPartition(topic, partition)], timeout=30)[0]
            return TaskMarker.parse(found.offset, found.metadata)
        except KafkaException as err:
            if not err.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _result(partition: int, status: str, digest: RowDigest, started: float) -> "pa.RecordBatch":
    import pyarrow as pa

    return pa.RecordBatch.from_pydict({
        "partition": pa.array([partition], pa.int32()), "status": [status], "records": pa.array([digest.count], pa.int64()),
        "rows": [digest.hex], "seconds": [time.monotonic() - started],
    })


def publish_partition(plan: TaskPlan, batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    """mapInArrow body: this task's partition of the batch, published once (module docstring)."""
    from pyspark import TaskContext

    started = time.monotonic()
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    first = next((b for b in batches if b.num_rows), None)
    digest = RowDigest()
    if first is None:
        yield _result(partition, "empty", digest, started)
        return
    tid = task_transactional_id(plan.driver_id, partition)
    where = f"brokers {plan.kafka.bootstrap_servers} topic {plan.kafka.topic} batch {plan.batch_id} partition {partition}"
    try:
        attempt = context.attemptNumber() if context is not None else 0
        status, digest = _publish(plan, partition, tid, itertools.chain([first], batches), attempt)
    except KafkaSinkError:
        raise
    except Exception as err:
        _drop_consumer(plan)  # made again by the retry, whose init also aborts what this attempt left open
        detail = err.args[0] if err.args else err
        raise KafkaSinkError(f"sink.kafka ({where}): not published: {detail}") from None
    yield _result(partition, status, digest, started)


def digest_partition(bounds: dict[int, int], topic: str, batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    """mapInArrow body: this task's record digest and count, nothing sent (the driver's check of a re-run);
    of the records below `bounds[partition]` (a partial marker's `upto`) when the partition has one. `topic`:
    the records' topic when the batch has no topic column."""
    from pyspark import TaskContext

    started = time.monotonic()
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    upto = bounds.get(partition, BUCKETS)
    digest = RowDigest()
    for batch in batches:
        for record_topic, key, value, headers in batch_rows(batch, topic):
            if upto >= BUCKETS:
                digest.add(record_topic, key, value, headers)
            else:
                hashed = record_hash(record_topic, key, value, headers)
                if bucket(hashed) < upto:
                    digest.add_hash(hashed)
    yield _result(partition, "digest", digest, started)


def _publish(plan: TaskPlan, partition: int, tid: str, batches: Iterable["pa.RecordBatch"], attempt: int) -> tuple[str, RowDigest]:
    producer = _producer(plan, tid)
    try:
        return _decide_and_send(plan, partition, producer, _consumer(plan), batches, attempt)
    finally:
        producer.purge()  # nothing is left to send after a commit or an abort; no transaction stays open
        producer.flush(0)


def _decide_and_send(plan: TaskPlan, partition: int, producer: Any, consumer: Any,
                     batches: Iterable["pa.RecordBatch"], attempt: int) -> tuple[str, RowDigest]:
    marker = read_task_marker(consumer, plan.marker_topic, partition)
    decision = task_decision(marker, partition, plan.batch_id, plan.input_digest, plan.replay_until, plan.replay)
    digest = RowDigest()
    if decision == "check":
        assert marker is not None
        for batch in batches:  # every record: the state stores of the batch must commit too
            for topic, key, value, headers in batch_rows(batch, plan.kafka.topic):
                digest.add(topic, key, value, headers)
        check_rows(marker, partition, plan.batch_id, digest)
        return "skipped", digest
    fence = plan.epoch.fence() if plan.epoch is not None else None
    where = f"batch {plan.batch_id} partition {partition}"

    if decision == "resume" or attempt > 0:  # some chunks committed, or an earlier attempt failed (out of time?)
        return "chunked", publish_in_chunks(plan=plan, partition=partition, producer=producer, consumer=consumer,
                                            batches=batches, marker=marker if decision == "resume" else None,
                                            fence=fence)
    if fence is not None:
        fence.check(f"{where}, before its Kafka transaction")
    timeout_ms = plan.kafka.transaction_timeout_ms
    opened = time.monotonic()
    producer.begin_transaction()
    try:
        for batch in batches:
            for topic, key, value, headers in batch_rows(batch, plan.kafka.topic):
                digest.add(topic, key, value, headers)
                produce(producer, topic, key, value, headers)
                if digest.count % chunks.CHECK_EVERY == 0 and chunks.out_of_time(time.monotonic() - opened, timeout_ms):
                    raise KafkaSinkError(
                        f"sink.kafka: {where}: {digest.count} records sent in {time.monotonic() - opened:.1f}s, past half of "
                        f"transactionTimeoutMs ({timeout_ms} ms): aborted; the task's retry sends the partition in chunks")
        commit_marker(plan, partition, producer, consumer, fence, where,
                      TaskMarker(plan.batch_id, plan.input_digest, digest.hex, digest.count, replay_token(plan)))
    except BaseException:
        abort(producer)
        raise
    return "published", digest
