"""What Spark 4.3 does when a query's stateful operators change, and what allowNonRestoredState makes of it.

Against the suite's real Spark session and a real RocksDB checkpoint of a query
that deduplicates then counts (operator 0 the count, 1 the deduplication: Spark
numbers them from the sink). Spark's own refusal is read by
job_runtime.checkpoints.nonrestored; with the flag the removed operator's state is dropped
and the count resumes from its restored state. The runtime's side (exit 13,
dropping and starting again) runs at the end of tests/runtime/test_runtime_kill_points.py.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from job_runtime.checkpoints import nonrestored

from savepoint_helpers import input_file, read_state, write_input


def start(spark: Any, input_dir: Path, checkpoint: Path, shape: str) -> Any:
    from pyspark.sql import functions as F

    rows = spark.readStream.schema("key STRING, n INT").option("maxFilesPerTrigger", 1).json(str(input_dir))
    if shape in ("dedup+count", "dedup"):
        rows = rows.dropDuplicates(["key", "n"])
    if shape in ("dedup+count", "count"):
        rows = rows.groupBy("key").agg(F.count("*").alias("count"))
    mode = "append" if shape == "dedup" else "update"
    writer = rows.writeStream.format("noop").outputMode(mode).option("checkpointLocation", f"file://{checkpoint}")
    return writer.trigger(availableNow=True).start()


def run(spark: Any, input_dir: Path, checkpoint: Path, shape: str) -> str:
    """Runs to the end; Spark's error text, or '' when the query finished."""
    query = start(spark, input_dir, checkpoint, shape)
    try:
        query.awaitTermination(300)
    except Exception as exc:
        return str(exc)
    return str(query.exception() or "")


def test_removed_operator_refused_or_dropped_renumbered_refused(spark: Any, tmp_path: Path) -> None:
    input_dir, old = tmp_path / "input", tmp_path / "old"
    for index in range(3):
        write_input(input_dir, index)
    assert run(spark, input_dir, old, "dedup+count") == ""
    distinct = Counter(key for key, _ in {(r["key"], r["n"]) for i in range(3) for r in input_file(i)})
    assert read_state(spark, f"file://{old}") == dict(distinct)
    write_input(input_dir, 3)

    removed = tmp_path / "removed"
    shutil.copytree(old, removed)
    failure = run(spark, input_dir, removed, "count")
    assert nonrestored.NOT_MATCH in failure, failure
    refused = nonrestored.decide(failure, allow_non_restored_state=False, checkpoint="ckpt")
    assert refused is not None and refused.refusal is not None and "no longer has (1 dedupe)" in refused.refusal
    allowed = nonrestored.decide(failure, allow_non_restored_state=True, checkpoint="ckpt")
    assert allowed is not None and allowed.refusal is None and allowed.drop == {1: "dedupe"}
    nonrestored.drop_operator_state(f"file://{removed}", allowed.drop, job="tests/nonrestored")
    assert sorted(p.name for p in (removed / "state").iterdir()) == ["0"]
    assert run(spark, input_dir, removed, "count") == ""
    # the count kept its state (distinct rows of files 0..2) and added every row of file 3
    assert read_state(spark, f"file://{removed}") == dict(distinct + Counter(r["key"] for r in input_file(3)))

    renumbered = tmp_path / "renumbered"
    shutil.copytree(old, renumbered)
    failure = run(spark, input_dir, renumbered, "dedup")
    decision = nonrestored.decide(failure, allow_non_restored_state=True, checkpoint="ckpt")
    assert decision is not None and decision.drop == {} and decision.refusal is not None, failure
    assert "no state can be restored for 0 dedupe, with or without allowNonRestoredState" in decision.refusal
