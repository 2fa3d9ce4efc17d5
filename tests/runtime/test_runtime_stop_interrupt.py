"""A stop that interrupts the batch in flight is a stop, not a failure (job_runtime.run.runner._stop_query).

Seen on s3a: stop-with-savepoint interrupted the S3 stream's read ("Read interrupted
while waiting for data", caused by InterruptedException), the query ended with that
exception, and the runtime exited 1 (failed, no savepoint) instead of 10. The query
object is a stand-in with StreamingQuery's three members: the rule under test is ours.
"""

from __future__ import annotations

from typing import Any

import pytest

from job_runtime.query.errors import interrupted_by_stop
from job_runtime.run.runner import Runner

INTERRUPTED = ("org.apache.spark.sql.streaming.StreamingQueryException: Error while reading data. Read interrupted while "
               "waiting for data\\nCaused by: java.lang.InterruptedException\\n\\tat java.base/java.util.concurrent.CountDownLatch")
REAL = "org.apache.spark.sql.streaming.StreamingQueryException: [DIVIDE_BY_ZERO] Division by zero."


class Query:
    def __init__(self, active: bool, before: str | None, after: str | None) -> None:
        self.isActive = active
        self._error = before
        self._after = after

    def stop(self) -> None:
        self.isActive = False
        self._error = self._error or self._after

    def exception(self) -> Any:
        return RuntimeError(self._error) if self._error else None


@pytest.mark.parametrize(("active", "before", "after", "expected"), [
    pytest.param(True, None, None, None, id="a clean stop"),
    pytest.param(True, None, INTERRUPTED, None, id="a read our stop interrupted is a stop"),
    pytest.param(True, None, REAL, "Division by zero", id="a real error raised while stopping is a failure"),
    pytest.param(False, REAL, None, "Division by zero", id="a query that had failed before the stop is a failure"),
    pytest.param(False, INTERRUPTED, None, "Read interrupted", id="an interruption before any stop is a failure"),
])
def test_stop_query_tells_our_interruption_from_a_failure(
    runner: Runner, active: bool, before: str | None, after: str | None, expected: str | None
) -> None:
    runner._query = Query(active, before, after)  # type: ignore[assignment]
    got = runner._stop_query()
    assert (got is None) if expected is None else (got is not None and expected in got), got


def test_interruption_marks() -> None:
    assert interrupted_by_stop(RuntimeError(INTERRUPTED))
    assert not interrupted_by_stop(RuntimeError(REAL))
