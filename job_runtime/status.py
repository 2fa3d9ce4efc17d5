"""Status figures from a StreamingQuery's last progress report.

Called by job_runtime.runner to answer GET /status. Pure: a progress dict (as
Spark's `StreamingQueryProgress.json`) in, the status fields out.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any


class RunState(str, Enum):
    """Lifecycle of the runtime, as /status and /healthz report it."""

    STARTING = "STARTING"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    SAVEPOINTING = "SAVEPOINTING"  # stop-with-savepoint: query stopped, savepoint being written
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


class SavepointState(str, Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


def watermark_ms(value: str | None) -> int | None:
    """Spark's ISO-8601 watermark ('1970-01-01T00:00:15.000Z') as epoch milliseconds."""
    if not value:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN when Spark had no time window yet


def progress_fields(progress: dict[str, Any] | None) -> dict[str, Any]:
    """The /status fields that come from the last progress report (all None before the first)."""
    if not progress:
        return {
            "lastBatchId": None,
            "watermark": None,
            "watermarkMs": None,
            "inputRowsPerSecond": None,
            "processedRowsPerSecond": None,
            "numInputRows": None,
            "batchDurationMs": None,
            "stateRows": None,
            "stateMemoryBytes": None,
            "rowsDroppedByWatermark": None,
            "lastProgressAt": None,
        }
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
        "stateRows": sum(int(op.get("numRowsTotal") or 0) for op in operators) if operators else 0,
        "stateMemoryBytes": sum(int(op.get("memoryUsedBytes") or 0) for op in operators) if operators else 0,
        "rowsDroppedByWatermark": sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators) if operators else 0,
        "lastProgressAt": progress.get("timestamp"),
    }
