"""Planning an oversized batch again: the checkpoint side of the exactly-once sink's batch cap.

Called by job_runtime.kafka.sink: `ExactlyOnceKafkaWriter.start` (before the query
plans, after init_transactions fenced the previous driver and the marker can be read)
asks `replan_planned_batch` whether the batch the offset log holds planned but not
committed is over the cap (job_runtime.kafka.budget) and was never published; if so
its `offsets/N` entry is deleted and Spark plans batch N again when the query starts,
under the cap its Kafka sources now have. The records of that plan were never
visible (no transaction of batch N committed: the marker says so), so nothing is
lost or repeated. This is what turns issue 26's crash loop (batch 0 planned with a
5 M-record backlog, replayed on every restart) into a run.

Files are read and deleted through Spark's own Hadoop file system, the one that wrote
them (so a local checkpoint's `.crc` file goes with its entry).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from job_runtime.kafka import budget

log = logging.getLogger("job_runtime.kafka_sink")


def _fs_path(spark: Any, checkpoint: str, relative: str) -> tuple[Any, Any]:
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint.rstrip('/')}/{relative}")
    return path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf()), path


def read_text(spark: Any, checkpoint: str, relative: str) -> str | None:
    """`<checkpoint>/<relative>` as text, None when absent."""
    fs, path = _fs_path(spark, checkpoint, relative)
    if not fs.exists(path):
        return None
    stream = fs.open(path)
    try:
        return str(spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def read_offset_log(spark: Any, checkpoint: str, batch_id: int) -> str | None:
    """`offsets/<batch_id>` of `checkpoint`; None when the batch has no entry."""
    return read_text(spark, checkpoint, f"offsets/{batch_id}")


def _batch_ids(spark: Any, checkpoint: str, log_dir: str) -> list[int]:
    fs, path = _fs_path(spark, checkpoint, log_dir)
    if not fs.exists(path):
        return []
    names = [str(status.getPath().getName()) for status in fs.listStatus(path)]
    return sorted(int(n) for n in names if n.isdigit())


@dataclass(frozen=True)
class PlannedBatch:
    """The batch the offset log holds planned and the commit log not committed, with its size in records."""

    batch_id: int
    records: int | None  # None: not all of its input is a Kafka source's (not counted)


def planned_batch(spark: Any, checkpoint: str) -> PlannedBatch | None:
    """The planned, uncommitted batch of `checkpoint`, or None (nothing planned past the last commit)."""
    planned = _batch_ids(spark, checkpoint, "offsets")
    if not planned:
        return None
    committed = _batch_ids(spark, checkpoint, "commits")
    batch_id = planned[-1]
    if committed and committed[-1] >= batch_id:
        return None
    current = read_offset_log(spark, checkpoint, batch_id)
    if current is None:
        return None
    previous = read_offset_log(spark, checkpoint, batch_id - 1) if batch_id > 0 else None
    sources = len(budget.source_lines(current))
    initial = [read_text(spark, checkpoint, f"sources/{i}/0") for i in range(sources)]
    return PlannedBatch(batch_id, budget.planned_records(current, previous, initial))


def replan_planned_batch(spark: Any, checkpoint: str, cap: int, published_until: int | None) -> PlannedBatch | None:
    """Drops the planned batch's offsets when it holds more than `cap` records and was never
    published (`published_until`: the batch the marker names); returns the dropped batch, or None."""
    batch = planned_batch(spark, checkpoint)
    if batch is None or not budget.replan(batch.batch_id, batch.records, cap, published_until):
        return None
    fs, path = _fs_path(spark, checkpoint, f"offsets/{batch.batch_id}")
    fs.delete(path, False)
    log.warning(
        "re-planned batch batchId=%s records=%s maxRecords=%s checkpoint=%s reason=planned over the exactly-once "
        "sink's batch cap and never published (marker at batch %s)", batch.batch_id, batch.records, cap, checkpoint,
        published_until,
    )
    return batch
