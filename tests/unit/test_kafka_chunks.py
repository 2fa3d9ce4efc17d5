"""A partition too slow for one transaction, sent in chunks (job_runtime.kafka.chunks, job_runtime.kafka.task_chunks):
the pure rules, and the task's spill and index on the local disk."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from job_runtime.kafka import chunks
from job_runtime.kafka.task_chunks import Indexed, Spill
from job_runtime.kafka.tasks import BUCKETS, RowDigest, bucket, record_hash


def records(count: int, seed: int = 1) -> list[tuple[str, bytes, bytes, None]]:
    rng = random.Random(seed)
    return [("out", f"k{rng.randrange(10**9)}".encode(), f"v{i}".encode(), None) for i in range(count)]


def arrow(rows: list[tuple[str, bytes, bytes, None]], size: int = 100) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({"topic": [r[0] for r in rows[i:i + size]], "key": [r[1] for r in rows[i:i + size]],
                                        "value": [r[2] for r in rows[i:i + size]]}) for i in range(0, len(rows), size)]


def test_a_records_bucket_depends_on_the_record_only() -> None:
    row = ("out", b"k", b"v", [("h", b"1")])
    assert bucket(record_hash(*row)) == bucket(RowDigest().add(*row)) and 0 <= bucket(record_hash(*row)) < BUCKETS
    assert bucket(record_hash("out", b"k", b"v", [("h", b"1")])) == bucket(record_hash("out", b"k", b"v", [("h", "1")]))
    spread = {bucket(record_hash(*r)) for r in records(2000)}
    assert len(spread) > 1900  # 2,000 records over 65,536 buckets: nearly all apart


def test_the_chunk_size_follows_the_rate_measured_within_a_quarter_of_the_timeout() -> None:
    assert chunks.chunk_target(60_000, 10_000, 40.0) == 3_750  # 250 records/s, 15 s of a 60 s timeout
    assert chunks.chunk_target(60_000) == 150_000  # nothing measured: FIRST_CHUNK_RATE (10 k/s), 15 s
    assert chunks.chunk_target(1_000, 1, 1000.0) == 1  # never empty
    assert not chunks.out_of_time(29.9, 60_000) and chunks.out_of_time(30.1, 60_000)


def test_ranges_take_whole_buckets_up_to_the_target_and_end_at_the_last_records() -> None:
    histogram = [0] * BUCKETS
    for b, n in ((0, 3), (1, 4), (5, 10), (9, 1), (200, 2)):
        histogram[b] = n
    assert chunks.next_range(histogram, 0, 7) == (0, 5)       # 3 + 4; bucket 5's ten would pass 7
    assert chunks.next_range(histogram, 5, 7) == (5, 6)       # one bucket over the target still goes, alone
    assert chunks.next_range(histogram, 6, 7) == (6, BUCKETS)  # 1 + 2, nothing after: the last chunk
    assert chunks.next_range(histogram, 201, 7) == (201, BUCKETS)  # nothing left: one transaction for the marker
    assert chunks.records_in(histogram, 0, BUCKETS) == 20
    with pytest.raises(ValueError):
        chunks.next_range(histogram, BUCKETS, 7)


def test_the_index_covers_every_record_once_and_digests_what_a_partial_marker_published(tmp_path: Path) -> None:
    rows = records(1000)
    upto = BUCKETS // 3
    spill = Spill(tmp_path)
    for batch in arrow(rows):
        spill.write(batch)
    indexed = Indexed(spill.batches(), upto, tmp_path, "out")
    whole = RowDigest()
    below = RowDigest()
    for row in rows:
        hashed = whole.add(*row)
        if bucket(hashed) < upto:
            below.add_hash(hashed)
    assert (indexed.total.hex, indexed.total.count) == (whole.hex, 1000)
    assert (indexed.published.hex, indexed.published.count) == (below.hex, below.count) and 0 < below.count < 1000
    assert sum(indexed.histogram) == 1000
    # chunks over any split of the buckets send each record exactly once, in whatever order it came
    got: list[tuple[str, bytes, bytes, None]] = []
    start = 0
    while start < BUCKETS:
        start, end = chunks.next_range(indexed.histogram, start, 137)
        got.extend(indexed.rows(start, end))
        start = end
    assert sorted(got) == sorted(rows)
    assert sorted(indexed.rows(upto, BUCKETS)) == sorted(r for r in rows if bucket(record_hash(*r)) >= upto)
    indexed.spill.remove()
    spill.remove()
    assert list(tmp_path.iterdir()) == []
