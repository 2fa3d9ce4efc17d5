"""Status figures from a StreamingQuery's last progress report.

Called by job_runtime.run.runner to answer GET /status. Pure: a progress dict (as
Spark's `StreamingQueryProgress.json`) in, the status fields out (the payload's
type is ``streamjob_contract.runtime_status.RuntimeStatus``).
"""

from __future__ import annotations

import json
from typing import Any

from streamjob_contract.runtime_status import watermark_ms


def progress_dict(progress: Any) -> dict[str, Any]:
    """A StreamingQueryProgress (or the dict older PySpark returns) as Spark's JSON dict."""
    return json.loads(progress.json) if hasattr(progress, "json") else dict(progress)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN when Spark had no time window yet


def state_rows(progress: dict[str, Any]) -> int:
    """Rows a progress report's stateful operators hold (0 without any)."""
    return sum(int(op.get("numRowsTotal") or 0) for op in progress.get("stateOperators") or [])


def rows_dropped(progress: dict[str, Any]) -> int:
    """Rows a progress report's stateful operators dropped as later than the watermark."""
    return sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in progress.get("stateOperators") or [])


class LateRowsTotal:
    """Late rows dropped since the driver started, summed over the batches that ran.

    Fed with the last progress report, and with the query's recent reports when batches were
    missed since the last call (Spark keeps the last spark.sql.streaming.numRecentProgressUpdates,
    100 by default; /status is polled every few seconds). Reports of idle triggers (no addBatch:
    no batch ran; they carry the id of the next batch) are not counted and do not advance the count.
    Not thread-safe: the caller holds its lock.
    """

    def __init__(self) -> None:
        self.total = 0
        self.counted_batch: int | None = None
        self.query_key: object = None

    def needs_history(self, query_key: object, last: dict[str, Any]) -> bool:
        """True when the last report alone may not cover every batch since the previous call."""
        batch = last.get("batchId")
        if query_key != self.query_key:
            return True
        return batch is not None and self.counted_batch is not None and batch > self.counted_batch + 1

    def add(self, query_key: object, reports: list[dict[str, Any]]) -> None:
        if query_key != self.query_key:  # a new query (restart within the driver): its batch ids go on from the checkpoint
            self.query_key = query_key
        ran = [r for r in reports if isinstance(r.get("batchId"), int) and "addBatch" in (r.get("durationMs") or {})]
        for report in sorted(ran, key=lambda r: int(r["batchId"])):
            batch = int(report["batchId"])
            if self.counted_batch is not None and batch <= self.counted_batch:
                continue
            self.total += rows_dropped(report)
            self.counted_batch = batch


def progress_fields(progress: dict[str, Any] | None) -> dict[str, Any]:
    """The /status fields that come from the last progress report; none before the first (the payload's
    type, ``RuntimeStatus``, says None for a field not given, so a new field is listed here once)."""
    if not progress:
        return {}
    operators = progress.get("stateOperators") or []
    watermark = (progress.get("eventTime") or {}).get("watermark")
    duration = (progress.get("durationMs") or {}).get("triggerExecution")
    return {
        "lastBatchId": progress.get("batchId"),
        "watermark": watermark,
        "watermarkMs": watermark_ms(watermark),
        "inputRowsPerSecond": _number(progress.get("inputRowsPerSecond")),
        "processedRowsPerSecond": _number(progress.get("processedRowsPerSecond")),
        "numInputRows": progress.get("numInputRows"),
        "batchDurationMs": duration,
        "stateRows": state_rows(progress),
        "stateMemoryBytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators) if operators else 0,
        "rowsDroppedByWatermark": rows_dropped(progress) if operators else 0,
        "lastProgressAt": progress.get("timestamp"),
    }


BATCH_LOG = "batch job="  # batch_lines' messages: "batch job=<job> <batch_line>"
# durationMs phases worth a line, in the order a micro-batch runs them
BATCH_PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def batch_line(progress: dict[str, Any]) -> str | None:
    """One log line's fields for a batch that ran (its rows, state rows and where its time went, ms);
    None for an idle trigger's report (no addBatch: no batch ran)."""
    durations = progress.get("durationMs") or {}
    if "addBatch" not in durations:
        return None
    phases = ",".join(f"{name}:{durations[name]}" for name in BATCH_PHASES if name in durations)
    return (f"id={progress.get('batchId')} rows={progress.get('numInputRows')} stateRows={state_rows(progress)} "
            f"durationMs={phases}")


def read_batch_line(line: str) -> dict[str, int] | None:
    """A runtime log line's batch_line fields (id, rows, stateRows and each durationMs phase, ms), or None for
    another line: the one reader of the format, for benchmarks and tests."""
    if BATCH_LOG not in line or "durationMs=" not in line:
        return None
    fields = dict(item.split("=", 1) for item in line.split(BATCH_LOG, 1)[1].split() if "=" in item)
    phases = dict(item.split(":") for item in fields.pop("durationMs").split(","))
    return {name: int(value) for name, value in {**fields, **phases}.items()}


def batch_lines(reports: list[Any], job: str) -> list[str]:
    """A log message (BATCH_LOG, `job`, batch_line) for each report (StreamingQueryProgress or dict) of a batch
    that ran, in order."""
    return [f"{BATCH_LOG}{job} {line}" for report in reports if (line := batch_line(progress_dict(report))) is not None]
