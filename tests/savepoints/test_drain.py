"""job_runtime.query.drain against Spark 4.3 itself: the stop for a savepoint ends the query between
batches, and Trigger.Once finishes exactly the batch a stop left planned (and no other).

The job is the savepoint tests' per-key count over JSON files, one file per batch
(savepoint_helpers); the expected state is computed there in plain Python.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from savepoint_helpers import expected_counts, input_file, read_state, run_to_end, start_query, write_input

from job_runtime.query import drain
from streamjob_contract.s3 import S3Config

WAIT = 240.0


def committed(checkpoint: Path) -> list[int]:
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def planned(checkpoint: Path) -> int | None:
    return drain.planned_batch(checkpoint.as_uri(), S3Config())


def read_files(checkpoint: Path, last: int) -> list[int]:
    """The input files batches 0..last read, from the file source's log (compacted entries included)."""
    found: set[int] = set()
    for entry in (checkpoint / "sources" / "0").iterdir():
        batch = entry.name.split(".")[0]
        if entry.name.startswith(".") or not batch.isdigit() or int(batch) > last:
            continue
        for line in entry.read_text().splitlines()[1:]:
            found.add(int(json.loads(line)["path"].rsplit("part-", 1)[1].split(".")[0]))
    return sorted(found)


def test_trigger_once_runs_exactly_the_planned_batch(spark: Any, tmp_path: Path) -> None:
    data, ckpt = tmp_path / "in", tmp_path / "ckpt"
    for i in range(3):
        write_input(data, i)
    run_to_end(spark, data, ckpt.as_uri())
    assert committed(ckpt) == [0, 1, 2]
    for name in ("2", ".2.crc"):  # batch 2 as a stop leaves it: planned, not committed
        (ckpt / "commits" / name).unlink(missing_ok=True)
    assert planned(ckpt) == 2
    write_input(data, 3)  # new input: Trigger.Once must not plan a batch for it

    query = start_query(spark, data, ckpt.as_uri(), available_now=False, once=True)
    assert drain.wait_finished(query, time.monotonic() + WAIT)
    assert query.exception() is None
    assert planned(ckpt) is None and committed(ckpt)[-1] == 2
    assert not (ckpt / "offsets" / "3").exists()
    assert read_state(spark, ckpt.as_uri()) == expected_counts(3)


def test_end_after_batch_under_steady_input_stops_between_batches(spark: Any, tmp_path: Path) -> None:
    data, ckpt = tmp_path / "in", tmp_path / "ckpt"
    write_input(data, 0)
    query = start_query(spark, data, ckpt.as_uri(), available_now=False)
    deadline = time.monotonic() + WAIT
    while not (ckpt / "commits" / "0").exists():
        assert time.monotonic() < deadline and query.isActive, query.exception()
        time.sleep(0.05)
    for i in range(1, 12):  # a file per batch: more input than the batches before the stop
        write_input(data, i)
    while not (ckpt / "commits" / "2").exists():
        assert time.monotonic() < deadline, query.exception()
        time.sleep(0.02)

    assert drain.end_after_batch(query, spark)
    assert drain.wait_ended(query, time.monotonic() + WAIT) in ("ended", "idle")
    query.stop()
    assert query.exception() is None
    left = planned(ckpt)
    if left is not None:  # the flag came while a batch was being planned: the runner finishes it alone
        again = start_query(spark, data, ckpt.as_uri(), available_now=False, once=True)
        assert drain.wait_finished(again, time.monotonic() + WAIT) and again.exception() is None
        assert committed(ckpt)[-1] == left
    assert planned(ckpt) is None
    last = committed(ckpt)[-1]
    assert 2 <= last < 11, f"stopped after batch {last}: not between batches of steady input"
    files = read_files(ckpt, last)
    assert len(files) == last + 1, files  # one file a batch
    expected: Counter[str] = Counter()
    for index in files:
        expected.update(row["key"] for row in input_file(index))
    assert read_state(spark, ckpt.as_uri()) == dict(expected)


def test_the_drain_leaves_most_of_the_savepoint_timeout_for_the_savepoint() -> None:
    from job_runtime.query import drain

    assert drain.drain_seconds(None) == drain.STOP_DRAIN_SECONDS
    assert drain.drain_seconds(3600) == drain.STOP_DRAIN_SECONDS
    assert drain.drain_seconds(60) == 15  # a 60 s savepoint timeout: 15 s for the batch, 45 s for the copy
