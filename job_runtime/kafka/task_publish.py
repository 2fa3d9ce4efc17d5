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
   again, and it commits (`published`).

Each task makes its producer and initialises it (a producer kept from an earlier task
would be fenced by any attempt of the partition on another worker since); the marker
consumer stays open in the Python worker between tasks. SASL credentials come from the executor's environment (job_runtime.kafka.auth),
never from the plan.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from job_runtime import testhooks
from job_runtime.kafka import auth as kafka_auth
from job_runtime.kafka.marker import KafkaSinkError
from job_runtime.kafka.tasks import RowDigest, TaskMarker, check_rows, task_decision, task_transactional_id
from streamjob_contract.jobdef import KafkaSink

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

log = logging.getLogger("job_runtime.kafka_sink")

RESULT_SCHEMA = "partition int, status string, records long, rows string, seconds double"
MARKER_READ_TIMEOUT = 120.0  # a loading coordinator, or an open transaction on the marker's partition
QUEUE_MESSAGES = 100_000
QUEUE_KBYTES = 65_536
# every task producer's settings but its brokers, credentials and transaction (benchmarks/executors_profile.py too)
PRODUCER_SETTINGS = {"enable.idempotence": True, "linger.ms": 5,
                     "queue.buffering.max.messages": QUEUE_MESSAGES, "queue.buffering.max.kbytes": QUEUE_KBYTES}


class EpochFence(Protocol):
    def check(self, where: str) -> None: ...


class EpochSource(Protocol):
    """The driver's epoch, checkable from here (job_runtime.checkpoints.epoch.EpochCheck)."""

    def fence(self) -> EpochFence: ...


@dataclass(frozen=True)
class TaskPlan:
    """What every task of batch `batch_id` needs; pickled into the Spark job (no secret in it)."""

    kafka: KafkaSink
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


def _client_conf(kafka: KafkaSink) -> dict[str, Any]:
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
    producer.init_transactions(max(plan.kafka.transaction_timeout_ms / 1000, 30.0))
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


def _rows(batches: Iterator["pa.RecordBatch"], first: "pa.RecordBatch") -> Iterator[tuple[str, bytes | None, bytes | None, Any]]:
    """(topic, key, value, headers) of every record, `first` batch first; headers None for every record
    when the batches have no headers column (a sink without headersColumn sends none)."""
    batch: pa.RecordBatch | None = first
    while batch is not None:
        columns = batch.to_pydict()
        headers = columns["headers"] if "headers" in columns else itertools.repeat(None, batch.num_rows)
        yield from zip(columns["topic"], columns["key"], columns["value"], headers, strict=True)
        batch = next(batches, None)


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
        status = _publish(plan, partition, tid, _rows(batches, first), digest)
    except KafkaSinkError:
        raise
    except Exception as err:
        _drop_consumer(plan)  # made again by the retry, whose init also aborts what this attempt left open
        detail = err.args[0] if err.args else err
        raise KafkaSinkError(f"sink.kafka ({where}): not published: {detail}") from None
    yield _result(partition, status, digest, started)


def digest_partition(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    """mapInArrow body: this task's record digest and count, nothing sent (the driver's check of a re-run)."""
    from pyspark import TaskContext

    started = time.monotonic()
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    digest = RowDigest()
    first = next((b for b in batches if b.num_rows), None)
    if first is not None:
        for topic, key, value, headers in _rows(batches, first):
            digest.add(topic, key, value, headers)
    yield _result(partition, "digest", digest, started)


def _publish(plan: TaskPlan, partition: int, tid: str, rows: Iterator[tuple[str, bytes | None, bytes | None, Any]], digest: RowDigest) -> str:
    producer = _producer(plan, tid)
    try:
        return _decide_and_send(plan, partition, producer, _consumer(plan), rows, digest)
    finally:
        producer.purge()  # nothing is left to send after a commit or an abort; no transaction stays open
        producer.flush(0)


def _decide_and_send(plan: TaskPlan, partition: int, producer: Any, consumer: Any,
                     rows: Iterator[tuple[str, bytes | None, bytes | None, Any]], digest: RowDigest) -> str:
    from confluent_kafka import TopicPartition

    marker = read_task_marker(consumer, plan.marker_topic, partition)
    decision = task_decision(marker, partition, plan.batch_id, plan.input_digest, plan.replay_until, plan.replay)
    if decision == "check":
        assert marker is not None
        for topic, key, value, headers in rows:  # every record: the state stores of the batch must commit too
            digest.add(topic, key, value, headers)
        check_rows(marker, partition, plan.batch_id, digest)
        return "skipped"
    fence = plan.epoch.fence() if plan.epoch is not None else None
    if fence is not None:
        fence.check(f"batch {plan.batch_id} partition {partition}, before its Kafka transaction")
    timeout = plan.kafka.transaction_timeout_ms / 1000
    producer.begin_transaction()
    try:
        for topic, key, value, headers in rows:
            digest.add(topic, key, value, headers)
            _produce(producer, topic, key, value, headers)
        replaying = plan.replay_until is not None and plan.batch_id <= plan.replay_until
        done = TaskMarker(plan.batch_id, plan.input_digest, digest.hex, digest.count, plan.replay if replaying else "")
        producer.send_offsets_to_transaction([TopicPartition(plan.marker_topic, partition, plan.batch_id + 1, done.metadata())],
                                             consumer.consumer_group_metadata(), timeout)
        testhooks.reached("kafka-task-before-commit")
        if fence is not None:
            fence.check(f"batch {plan.batch_id} partition {partition}, before its Kafka commit")
        producer.commit_transaction(timeout)
    except BaseException:
        try:
            producer.abort_transaction(30)
        except Exception:  # the next init of this id aborts it anyway
            pass
        raise
    testhooks.reached("kafka-task-after-commit")
    return "published"


def _produce(producer: Any, topic: str, key: bytes | None, value: bytes | None, headers: Any) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=list(headers) if headers else None)
            return
        except BufferError:  # the local queue is full: let deliveries drain
            producer.poll(0.05)
