"""One task's partition sent in several transactions, each committing a partial task marker.

Called by job_runtime.kafka.task_publish, on an executor: in any attempt of a task after
its first (the first one's transaction ran out of its share of the timeout, or the attempt
was lost), and when the task's marker is partial (an earlier attempt committed some chunks). The rules (when, how many records, which buckets) are
job_runtime.kafka.chunks; the buckets and markers job_runtime.kafka.tasks.

1. index: every record of the partition is hashed once; the records go to a file on
   the executor's disk with their bucket beside them, and a histogram counts them by
   bucket. Records below a partial marker's `upto` are only digested: they must match
   the marker (checked before anything is sent) and are not sent again;
2. each chunk, a range of buckets sized from the rate measured, goes in a transaction
   that commits the partial marker `upto = end of the range` with the digest of every
   record below it; the last one commits the complete marker. A chunk that runs out of
   time is aborted and sent again smaller.

Memory stays one Arrow batch at a time: the files are read back memory-mapped.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from job_runtime import testhooks
from job_runtime.kafka import chunks
from job_runtime.kafka.marker import KafkaSinkError
from job_runtime.kafka.send import Row, batch_rows, produce
from job_runtime.kafka.tasks import BUCKETS, RowDigest, TaskMarker, bucket, check_rows

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

log = logging.getLogger("job_runtime.kafka_sink")


def spill_dir() -> Path:
    """The executor's scratch disk: Spark's local dir when it names one, else the temporary folder."""
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0]
    return Path(local) if local and Path(local).is_dir() else Path(tempfile.gettempdir())


class Spill:
    """Arrow batches written to one file on the executor's disk, read back memory-mapped."""

    def __init__(self, directory: Path) -> None:
        handle, name = tempfile.mkstemp(prefix="streamjob-partition-", suffix=".arrow", dir=directory)
        os.close(handle)
        self.path = Path(name)
        self._sink: Any = None
        self._writer: Any = None

    def write(self, batch: "pa.RecordBatch") -> None:
        import pyarrow as pa

        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_stream(self._sink, batch.schema)
        self._writer.write_batch(batch)

    def finish(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None

    def batches(self) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        self.finish()
        if self.path.stat().st_size == 0:
            return
        with pa.memory_map(str(self.path)) as source:
            yield from pa.ipc.open_stream(source)

    def remove(self) -> None:
        self.finish()
        self.path.unlink(missing_ok=True)


class Indexed:
    """The partition's records with their bucket (an uint16 column), its histogram, and the digests
    of the records below `upto` (already published) and of all of them."""

    def __init__(self, batches: Iterable["pa.RecordBatch"], upto: int, directory: Path, topic: str) -> None:
        import pyarrow as pa

        self.topic = topic  # the records' topic when the batches have no topic column (batch_rows)
        self.spill = Spill(directory)
        self.histogram = [0] * BUCKETS
        self.published = RowDigest()
        self.total = RowDigest()
        for batch in batches:
            if not batch.num_rows:
                continue
            buckets = []
            for topic, key, value, headers in batch_rows(batch, self.topic):
                hashed = self.total.add(topic, key, value, headers)
                b = bucket(hashed)
                buckets.append(b)
                self.histogram[b] += 1
                if b < upto:
                    self.published.add_hash(hashed)
            self.spill.write(batch.append_column("_bucket", pa.array(buckets, pa.uint16())))
        self.spill.finish()

    def rows(self, start: int, end: int) -> Iterator[Row]:
        """The records of buckets [start, end)."""
        import pyarrow.compute as pc  # type: ignore[import-untyped]

        for batch in self.spill.batches():
            column = batch.column("_bucket")
            chosen = batch.filter(pc.and_(pc.greater_equal(column, start), pc.less(column, end)))
            if chosen.num_rows:
                yield from batch_rows(chosen, self.topic)


def publish_in_chunks(*, plan: Any, partition: int, producer: Any, consumer: Any, batches: Iterable["pa.RecordBatch"],
                      marker: TaskMarker | None, fence: Any) -> RowDigest:
    """Sends the partition (`batches`) in chunks, each with a partial marker, the last with the complete one.
    `marker`: this batch's partial marker (resume: its records are checked, not sent again), else None.
    Returns the digest of every record of the partition."""
    timeout_ms = plan.kafka.transaction_timeout_ms
    where = f"batch {plan.batch_id} partition {partition}"
    start = marker.upto if marker is not None else 0
    indexed = Indexed(batches, start, spill_dir(), plan.kafka.topic)
    try:
        if marker is not None:
            check_rows(marker, partition, plan.batch_id, indexed.published)
        done = indexed.published
        target = chunks.chunk_target(timeout_ms)
        transactions = 0
        while start < BUCKETS:
            first, end = chunks.next_range(indexed.histogram, start, target)
            if fence is not None:
                fence.check(f"{where}, before its Kafka transaction (buckets {first}-{end})")
            sent, opened, finished = RowDigest(), time.monotonic(), True
            producer.begin_transaction()
            try:
                for topic, key, value, headers in indexed.rows(first, end):
                    sent.add(topic, key, value, headers)
                    produce(producer, topic, key, value, headers)
                    if sent.count % chunks.CHECK_EVERY == 0 and chunks.out_of_time(time.monotonic() - opened, timeout_ms):
                        finished = False
                        break
                if finished:
                    covered = done.plus(sent)
                    commit_marker(plan, partition, producer, consumer, fence, where,
                                  TaskMarker(plan.batch_id, plan.input_digest, covered.hex, covered.count, replay_token(plan), end))
            except BaseException:
                abort(producer)
                raise
            seconds = time.monotonic() - opened
            if not finished:  # out of time before its last record: aborted, sent again smaller
                abort(producer)
                planned = chunks.records_in(indexed.histogram, first, end)
                if end - first == 1:
                    raise KafkaSinkError(
                        f"sink.kafka: {where}: the {planned} records of one bucket cannot be sent within "
                        f"{chunks.SEND_SHARE:g} of transactionTimeoutMs ({timeout_ms} ms); raise it (docs/delivery.md)")
                target = max(1, min(planned // 2, chunks.chunk_target(timeout_ms, sent.count, seconds)))
                log.info("chunk out of time, sent again smaller batchId=%s partition=%d buckets=%d-%d records=%d target=%d",
                         plan.batch_id, partition, first, end, sent.count, target)
                continue
            transactions += 1
            done = done.plus(sent)
            if sent.count >= chunks.CHECK_EVERY:
                target = chunks.chunk_target(timeout_ms, sent.count, seconds)
            start = end
        if done.hex != indexed.total.hex or done.count != indexed.total.count:  # every bucket sent once
            raise KafkaSinkError(f"sink.kafka: {where}: the chunks sent {done.count} records, the partition holds {indexed.total.count}")
        log.info("published in chunks batchId=%s partition=%d records=%d transactions=%d resumed=%s",
                 plan.batch_id, partition, done.count, transactions, marker is not None)
        return done
    finally:
        indexed.spill.remove()


def replay_token(plan: Any) -> str:
    """The explicit restore's token a marker carries when its batch is replayed ("" otherwise)."""
    return plan.replay if plan.replay_until is not None and plan.batch_id <= plan.replay_until else ""


def commit_marker(plan: Any, partition: int, producer: Any, consumer: Any, fence: Any, where: str, marker: TaskMarker) -> None:
    """The open transaction's task marker sent, the driver's epoch checked, the transaction committed."""
    from confluent_kafka import TopicPartition

    timeout = plan.kafka.transaction_timeout_ms / 1000
    producer.send_offsets_to_transaction([TopicPartition(plan.marker_topic, partition, plan.batch_id + 1, marker.metadata())],
                                         consumer.consumer_group_metadata(), timeout)
    testhooks.reached("kafka-task-before-commit")
    if fence is not None:
        fence.check(f"{where}, before its Kafka commit")
    producer.commit_transaction(timeout)
    testhooks.reached("kafka-task-after-commit")


def abort(producer: Any) -> None:
    try:
        producer.abort_transaction(30)
    except Exception:  # the next init of this id aborts it anyway
        pass
