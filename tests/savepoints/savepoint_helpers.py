"""The savepoint tests' job and its independently computed expectations.

Imported by tests/savepoints/conftest.py and the tests. The job is a per-key count
over JSON files, one file per micro-batch, with its state in RocksDB; the expected
state after any number of files is computed here in plain Python.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUCKET = "savepoints"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_PARTITIONS = 3
KEYS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta")


def input_file(index: int) -> list[dict[str, Any]]:
    """Deterministic rows of input file ``index``: a different key mix per file."""
    return [{"key": KEYS[(index * 3 + i * i) % len(KEYS)], "n": i} for i in range(5 + index)]


def expected_counts(files: int) -> dict[str, int]:
    """Per-key counts after the first ``files`` input files: the query's state, computed in plain Python."""
    counts: Counter[str] = Counter()
    for index in range(files):
        counts.update(row["key"] for row in input_file(index))
    return dict(counts)


def write_input(directory: Path, index: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".part-{index:04d}.json.tmp"
    tmp.write_text("".join(json.dumps(row) + "\n" for row in input_file(index)))
    tmp.rename(directory / f"part-{index:04d}.json")


def start_query(spark: Any, input_dir: Path, checkpoint: str, *, available_now: bool, once: bool = False) -> Any:
    """The test job: a per-key count over JSON files, one file per batch, state in RocksDB
    (`once`: Trigger.Once, the batch the checkpoint left planned or one new batch)."""
    from pyspark.sql import functions as F

    counts = (
        spark.readStream.schema("key STRING, n INT").option("maxFilesPerTrigger", 1).json(str(input_dir))
        .groupBy("key").agg(F.count("*").alias("count"))
    )
    writer = counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", checkpoint)
    if once:
        return writer.trigger(once=True).start()
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="200 milliseconds")
    return writer.start()


def run_to_end(spark: Any, input_dir: Path, checkpoint: str) -> None:
    query = start_query(spark, input_dir, checkpoint, available_now=True)
    query.awaitTermination(300)
    if query.exception() is not None:
        raise AssertionError(f"query failed: {query.exception()}")


def read_state(spark: Any, checkpoint: str, batch_id: int | None = None) -> dict[str, int]:
    """The aggregation state as Spark's state data source reads it back."""
    reader = spark.read.format("statestore")
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    rows = reader.load(checkpoint).select("key.key", "value.count").collect()
    return {r[0]: int(r[1]) for r in rows}


@dataclass(frozen=True)
class RealCheckpoint:
    path: Path
    input_dir: Path
    files: int

    @property
    def uri(self) -> str:
        return f"file://{self.path}"

    def copy_to(self, target: Path) -> Path:
        shutil.copytree(self.path, target)
        return target


