"""What a streaming query's error means and says: one readable line, and whether it is our own stop.

Used by job_runtime.run.runner and job_runtime.run.savepoint_requests.
"""

from __future__ import annotations


def interrupted_by_stop(err: BaseException) -> bool:
    """Whether a query's error is the interruption that ``query.stop()`` causes (any cause in the chain)."""
    text = str(err)
    return any(mark in text for mark in ("InterruptedException", "InterruptedIOException", "ClosedByInterruptException",
                                         "Read interrupted"))


def describe(err: BaseException) -> str:
    """One readable line for an error: Spark's StreamingQueryException carries a long trace."""
    text = str(err).strip()
    if hasattr(err, "getMessage"):
        try:
            text = str(err.getMessage()).strip() or text
        except Exception:
            pass
    lines = [line for line in text.splitlines() if line.strip()]
    head = python_exception(lines) or (lines[0] if lines else type(err).__name__)
    return head if len(head) <= 2000 else head[:2000] + "..."


def python_exception(lines: list[str]) -> str | None:
    """The exception line of a Python traceback Spark wraps ("An exception was raised by the
    Python Proxy. Return Message: Traceback ..."), e.g. a foreachBatch sink's KafkaSinkError."""
    start = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if start is None:
        return None
    return next((line for line in lines[start + 1:] if not line[0].isspace() and not line.startswith("Traceback")), None)
