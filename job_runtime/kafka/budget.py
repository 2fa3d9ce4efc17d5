"""How big an exactly-once Kafka batch may be: pure rules, no I/O.

Called by job_runtime.query.pipeline (the cap it puts on each Kafka source of a job
whose sink is the exactly-once Kafka sink) and by job_runtime.kafka.replan (whether
a batch planned but never published is too big and must be planned again).

One micro-batch is one Kafka transaction, produced by the driver, and it must commit
within `transactionTimeoutMs`, or the broker aborts it and the batch, replayed with
the same offsets, fails the same way for ever (issue 26). So the batch is capped in
records: the timeout times a floor on the driver's publish rate, halved for the
planning, reading and commit around the records. The floor, 20,000 records/s, is a
tenth of what the driver's Arrow path publishes on two cores (about 200,000/s,
docs/benchmarks/kafka-backlog-5m-default.md), so the default 60 s gives 600,000 records a
batch. The cap also bounds memory: the driver holds two Spark partitions of one batch at a
time (job_runtime.kafka.driver_rows: one sent, the next fetched), each received as one task result, and the producer's
queue is bounded. A Spark partition holds at most PARTITION_RECORDS records: the sources are
given Spark's `maxRecordsPerPartition`, which splits a Kafka partition's share of a large batch
into consecutive ranges (read in order, so each partition's order is kept) and leaves a small
batch's one range a partition: the driver's heap follows the size of the results it receives
(docs/delivery.md#no-batch-is-too-big has the measurements). The split serves only when a
source's partitions reach the sink as they are: a job whose every source passes through an
aggregation or a deduplication on the way (`split_serves`) hands the sink the shuffle's
partitions, whose size no source split bounds, and reading a source in more tasks then only
costs time (about 6% of the windows job's, docs/benchmarks/flink.md).

With the executors producing (`producers: executors`) each task sends its own partition in a
transaction of its own, the driver holds no record, and a task too slow for its transaction sends
in chunks (job_runtime.kafka.task_chunks) rather than failing the batch: the cap only spreads a
backlog over batches, and no partition is split. Its floor is a task's rate, twice the driver's,
assumed for the whole batch in one task (one partition, or every record in one): 1,200,000
records at the default 60 s.
Every batch pays fixed costs (planning, the logs, each task's producer and marker), which at the
driver's cap made 167 batches of a 50 M backlog (docs/benchmarks/kafka-backlog-50m.md).

A transaction that still ran out of time (a slower machine, large records) halves
the cap for that checkpoint (`CapNote`, kept in `<checkpoint>/_streamjob_batch_cap.json`),
and the batch is planned again smaller: each failure halves it, so no batch is
replayed for ever.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RECORDS_PER_SECOND_FLOOR = 20_000  # the driver's publish rate assumed for the cap, a tenth of what it does
TASK_RECORDS_PER_SECOND_FLOOR = 40_000  # one task's, with the executors producing (about 130,000/s warm here)
BUDGET_SHARE = 0.5  # of the transaction timeout, for the records themselves
MIN_BATCH_RECORDS = 1_000  # a cap never goes below this (a halving stops here)
MAX_OFFSETS = "maxOffsetsPerTrigger"
PARTITION_RECORDS = 75_000  # the driver's mode: the most records one Spark partition (one task result) holds
MAX_PARTITION = "maxRecordsPerPartition"  # Spark's Kafka source option that splits larger ranges
CAP_NOTE = "_streamjob_batch_cap.json"  # in the checkpoint: a cap lowered after a transaction ran out of time
TIMED_OUT_SHARE = 0.8  # a failed transaction open this share of its timeout ran out of time


def budget_records(transaction_timeout_ms: int, executors: bool = False) -> int:
    """The records one batch may carry: timeout x rate floor (the driver's, or one task's when the
    executors produce) x share, at least MIN_BATCH_RECORDS."""
    rate = TASK_RECORDS_PER_SECOND_FLOOR if executors else RECORDS_PER_SECOND_FLOOR
    return max(MIN_BATCH_RECORDS, int(transaction_timeout_ms / 1000 * rate * BUDGET_SHARE))


def batch_cap(transaction_timeout_ms: int, noted: int | None = None, executors: bool = False) -> int:
    """The records a batch may hold: the budget, or less when a note lowered it (a note is written
    by the driver's mode only; one left from it still applies after a switch to the executors)."""
    budget = budget_records(transaction_timeout_ms, executors)
    return min(budget, max(MIN_BATCH_RECORDS, noted)) if noted is not None else budget


def source_cap(cap: int, kafka_sources: int) -> int:
    """Each Kafka source's share of the batch cap (every source adds its records to the batch)."""
    return max(1, cap // max(1, kafka_sources))


@dataclass(frozen=True)
class SourceLimit:
    """What an exactly-once Kafka sink asks of each Kafka source: at most `records` a batch, and, when
    the driver produces, at most `partition_records` in one Spark partition (None: no split)."""

    records: int
    partition_records: int | None = None


def source_limit(cap: int, kafka_sources: int, executors: bool) -> SourceLimit:
    return SourceLimit(source_cap(cap, kafka_sources), None if executors else PARTITION_RECORDS)


# Logical plan nodes (Spark's analyzed plan, by node name) whose streaming execution always shuffles
# their input by key before the node's output: what reaches the sink above one of them is the
# shuffle's partitions, not a source's. Joins are not here (a stream-static join may broadcast and
# keep the stream's partitions), nor repartition (repartition(1) gathers a batch in one partition).
SHUFFLING_NODES = frozenset({
    "Aggregate", "Distinct", "Deduplicate", "DeduplicateWithinWatermark",
    "FlatMapGroupsWithState", "FlatMapGroupsInPandasWithState", "TransformWithState",
    "TransformWithStateInPySpark", "TransformWithStateInPandas",
})


@dataclass(frozen=True)
class PlanNode:
    """A logical plan as its node names: enough to tell where the shuffles are."""

    name: str
    children: tuple["PlanNode", ...] = ()


def split_serves(plan: PlanNode) -> bool:
    """Pure: does splitting the sources' partitions bound what the sink receives? Yes when some
    leaf (a source) reaches the root without passing a SHUFFLING_NODES node; no when every path
    from the root to a leaf crosses one (then the sink's partitions are a shuffle's)."""
    if plan.name in SHUFFLING_NODES:
        return False
    if not plan.children:
        return True
    return any(split_serves(child) for child in plan.children)


def unsplit(limit: SourceLimit) -> SourceLimit:
    return SourceLimit(limit.records, None)


def capped_options(options: Mapping[str, str], cap: int, key: str = MAX_OFFSETS) -> tuple[dict[str, str], str | None]:
    """A Kafka source's options with `key` (maxOffsetsPerTrigger by default) at most `cap`, and the
    user's value when it was lowered ("unset" when there was none; None when it was kept)."""
    result = dict(options)
    spelled = next((k for k in options if k.lower() == key.lower()), None)  # Spark reads source options in any case
    own = options[spelled] if spelled is not None else None
    if own is not None and own.strip().isdigit() and int(own) <= cap:
        return result, None
    if spelled is not None:
        del result[spelled]
    result[key] = str(cap)
    return result, own if own is not None else "unset"


def limited_options(options: Mapping[str, str], limit: SourceLimit) -> tuple[dict[str, str], dict[str, str]]:
    """A Kafka source's options under `limit`, and the user's values it lowered, by option."""
    result, own = capped_options(options, limit.records)
    lowered = {MAX_OFFSETS: own} if own is not None else {}
    if limit.partition_records is not None:
        result, own = capped_options(result, limit.partition_records, MAX_PARTITION)
        if own is not None:
            lowered[MAX_PARTITION] = own
    return result, lowered


def kafka_offsets(line: str) -> dict[tuple[str, int], int] | None:
    """The partition offsets of one source in an offset log line ({"topic":{"0":12}}), None when
    the line is not a Kafka source's (another kind of source, or "-" for none yet)."""
    start = line.find("{")
    if start < 0:
        return None
    try:
        body = json.loads(line[start:])
    except ValueError:
        return None
    if not isinstance(body, dict) or not body:
        return None
    found: dict[tuple[str, int], int] = {}
    for topic, partitions in body.items():
        if not isinstance(partitions, dict):
            return None
        for partition, offset in partitions.items():
            if not str(partition).lstrip("-").isdigit() or not isinstance(offset, int):
                return None
            found[(str(topic), int(partition))] = offset
    return found


def source_lines(offset_log: str) -> list[str]:
    """The per-source lines of an offset log entry (after the version and the batch metadata)."""
    return offset_log.splitlines()[2:]


def planned_records(current: str, previous: str | None, initial: Sequence[str | None]) -> int | None:
    """Records a planned batch reads from its Kafka sources: its end offsets (`offsets/N`) minus
    where it starts (`offsets/N-1`, or for the first batch of a source the initial offsets Spark's
    Kafka source logged, `sources/<i>/0`, in `initial`). None when no source is Kafka or a start is
    unknown. A partition with no known start counts from 0 (an over-count: at worst a re-plan)."""
    ends = source_lines(current)
    starts = source_lines(previous) if previous is not None else []
    total, kafka = 0, False
    for i, line in enumerate(ends):
        end = kafka_offsets(line)
        if end is None:
            continue
        start = kafka_offsets(starts[i]) if i < len(starts) else None
        if start is None:
            start = kafka_offsets(initial[i] or "") if i < len(initial) else None
        if start is None:
            return None
        kafka = True
        total += sum(max(0, offset - start.get(tp, 0)) for tp, offset in end.items() if offset >= 0)
    return total if kafka else None


def replan(batch_id: int, planned: int | None, cap: int, published_until: int | None) -> bool:
    """Pure: drop batch `batch_id`'s plan so Spark plans it again under `cap`? Only when it holds more
    than the cap and was never published (the marker names an earlier batch, or none): its output
    went nowhere, so planning it anew loses and repeats nothing."""
    if planned is None or planned <= cap:
        return False
    return published_until is None or published_until < batch_id


def halved_cap(planned: int | None, sent: int, cap: int) -> int:
    """The cap after a transaction ran out of time: half of what the batch held (or of what it had
    sent, when it sent more than planned counted), never above half the cap in force, never below MIN."""
    held = max(planned or 0, sent)
    return max(MIN_BATCH_RECORDS, min(cap, held) // 2)


def ran_out_of_time(open_seconds: float, transaction_timeout_ms: int) -> bool:
    return open_seconds >= transaction_timeout_ms / 1000 * TIMED_OUT_SHARE


def parse_note(text: bytes | None) -> int | None:
    """The cap a note holds, None for no note or one that does not parse (the budget applies)."""
    if not text:
        return None
    try:
        value = json.loads(text).get("maxRecords")
    except (ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def format_note(cap: int, batch_id: int) -> bytes:
    return json.dumps({"maxRecords": cap, "afterBatch": batch_id}, separators=(",", ":")).encode()
