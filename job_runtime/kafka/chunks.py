"""How a task splits a partition too slow for one transaction: pure rules, no I/O.

Called by job_runtime.kafka.task_publish (when to give up on one transaction) and
job_runtime.kafka.task_chunks (how many records the next chunk takes, which buckets
those are). The bucket of a record and the partial task marker are job_runtime.kafka.tasks'.

A task first sends its partition in one transaction, as fast as it can. If that
transaction is still sending after SEND_SHARE of `transactionTimeoutMs` (a slow
broker, a slow query upstream of the sink in the same task, very large records),
it is aborted before the broker would, and the attempt fails. Spark's retry of the
task computes the partition first, onto the executor's disk, with no transaction
open, then sends it in chunks: the first sized from a low rate (FIRST_CHUNK_RATE), each
next one from the rate the last one showed, planned to take CHUNK_SHARE of the
timeout. A chunk that still runs past SEND_SHARE is aborted and sent again smaller. So no transaction
is committed after the broker could have aborted it, and no partition is replayed
for ever because it is too big to publish at once (issue 26).
"""

from __future__ import annotations

from collections.abc import Sequence

from job_runtime.kafka.tasks import BUCKETS

SEND_SHARE = 0.5  # of transactionTimeoutMs: a transaction still sending past this is aborted (the rest is for its commit)
CHUNK_SHARE = 0.25  # of transactionTimeoutMs: what a chunk is planned to take at the rate measured
CHECK_EVERY = 512  # records between two looks at the clock (out_of_time) while sending
FIRST_CHUNK_RATE = 10_000  # records/s assumed before a chunk measured one: the task was slow (the driver's old floor)


def out_of_time(open_seconds: float, transaction_timeout_ms: int) -> bool:
    """A transaction open this long must not go on sending: abort it, send again in chunks."""
    return open_seconds > transaction_timeout_ms / 1000 * SEND_SHARE


def chunk_target(transaction_timeout_ms: int, sent: int | None = None, seconds: float | None = None) -> int:
    """Records for the next chunk: CHUNK_SHARE of the timeout at the rate measured (`sent` records in
    `seconds`), or at FIRST_CHUNK_RATE when nothing was measured; at least 1."""
    rate = sent / seconds if sent is not None and seconds is not None and seconds > 0 else FIRST_CHUNK_RATE
    return max(1, int(rate * transaction_timeout_ms / 1000 * CHUNK_SHARE))


def next_range(histogram: Sequence[int], start: int, target: int) -> tuple[int, int]:
    """The buckets [start, end) of the next chunk: at least one bucket, then as many as keep it within
    `target` records. When every bucket after `end` is empty, `end` is BUCKETS (the chunk is the last)."""
    if not 0 <= start < BUCKETS:
        raise ValueError(f"start {start} outside [0, {BUCKETS})")
    total, end = histogram[start], start + 1
    while end < BUCKETS and total + histogram[end] <= target:
        total += histogram[end]
        end += 1
    if not any(histogram[end:]):
        end = BUCKETS
    return start, end


def records_in(histogram: Sequence[int], start: int, end: int) -> int:
    return sum(histogram[start:end])
