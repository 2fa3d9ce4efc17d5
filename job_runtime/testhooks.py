"""Test hooks: pause the runtime at a named instant so a test can SIGKILL it exactly there,
or make one named step raise as if its storage call had failed.

Called by job_runtime.savepoints while it copies files (savepoints and restores) and by
job_runtime.kafka.sink around its transaction commit.
Off unless the environment names a point; nothing else in the runtime reads
these variables. The kill tests (tests/runtime/test_runtime_kill_points.py) set:

    STREAMJOB_PAUSE_AT   points, one a line; this hook takes
                         "savepoint:<n>"  pause after the n-th file of a savepoint was copied
                         "savepoint-planned:<n>"  the n-th savepoint listed its files, copied none
                         "restore:<n>"    pause after the n-th file of a restore was copied
                         "kafka-before-commit:<n>"  the Kafka sink's n-th transaction, sent, not committed
                         "kafka-after-commit:<n>"   the n-th transaction committed, before Spark's commit log
                         (with executors producing, the batch marker's transaction: every task published)
                         "kafka-task-before-commit:<n>"  an executor's n-th task transaction sent, not committed
                         "kafka-task-after-commit:<n>"   an executor's n-th task transaction committed
                         (points inside Spark's own writes, "open:|write:|close:<regex>",
                         belong to the test's JVM hook, tests/runtime/pausepoint/)
    STREAMJOB_PAUSE_DIR  where "paused-<line number>" is written when a point is reached

The pausing thread writes the marker and blocks until the kill, or until the test writes
"resume-<line number>" in STREAMJOB_PAUSE_DIR (a test that acts at the instant, then lets
the runtime go on: say, deletes what Spark's state maintenance would, mid-savepoint).

    STREAMJOB_FAIL_AT    points, one a line, where ``fail`` raises ``InjectedFault``:
                         "savepoint-manifest-put:<n>"       the n-th savepoint's manifest PUT fails
                                                             (nothing stored)
                         "savepoint-manifest-response:<n>"  the n-th manifest is stored but the call
                                                             raises (a lost response, a failed marker delete)
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PAUSE_AT = "STREAMJOB_PAUSE_AT"
PAUSE_DIR = "STREAMJOB_PAUSE_DIR"
FAIL_AT = "STREAMJOB_FAIL_AT"

_lock = threading.Lock()
_counts: dict[str, int] = {}
_fail_counts: dict[str, int] = {}


class InjectedFault(OSError):
    """The failure a test asked for at a named step (STREAMJOB_FAIL_AT)."""


def _occurrence(point: str, variable: str, counts: dict[str, int]) -> tuple[str, list[str]] | None:
    """Counts one occurrence of ``point``; ("point:n", the variable's lines) when the variable names it."""
    wanted = os.environ.get(variable)
    if not wanted or f"{point}:" not in wanted:
        return None
    with _lock:
        counts[point] = counts.get(point, 0) + 1
        spec = f"{point}:{counts[point]}"
    lines = wanted.split("\n")
    return (spec, lines) if spec in lines else None


def fail(point: str) -> None:
    """Count one occurrence of `point`; raise ``InjectedFault`` when STREAMJOB_FAIL_AT names this occurrence."""
    named = _occurrence(point, FAIL_AT, _fail_counts)
    if named is not None:
        raise InjectedFault(f"injected fault at {named[0]}")


def reached(point: str) -> None:
    """Count one occurrence of `point`; pause for good when STREAMJOB_PAUSE_AT names this occurrence."""
    named = _occurrence(point, PAUSE_AT, _counts)
    if named is None:
        return
    spec, lines = named
    directory = Path(os.environ.get(PAUSE_DIR, "."))
    marker = f"paused-{lines.index(spec)}"
    tmp = directory / f"{marker}.tmp"
    tmp.write_text(f"{spec}\n")
    tmp.replace(directory / marker)
    resume = directory / f"resume-{lines.index(spec)}"
    while not resume.exists():
        time.sleep(0.2)
