"""A test hook: pause the runtime at a named instant so a test can SIGKILL it exactly there.

Called by job_runtime.savepoint while it copies files (savepoints and restores).
Off unless the environment names a point; nothing else in the runtime reads
these variables. The kill tests (tests/runtime/test_runtime_kill_points.py) set:

    STREAMJOB_PAUSE_AT   "savepoint:<n>"  pause after the n-th file of a savepoint was copied
                         "restore:<n>"    pause after the n-th file of a restore was copied
                         (points inside Spark's own writes, "open:|write:|close:<regex>",
                         belong to the test's JVM hook, tests/runtime/pausepoint/)
    STREAMJOB_PAUSE_DIR  where "paused" is written when the point is reached

The pausing thread writes the marker and blocks for good: only the kill ends it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PAUSE_AT = "STREAMJOB_PAUSE_AT"
PAUSE_DIR = "STREAMJOB_PAUSE_DIR"

_lock = threading.Lock()
_counts: dict[str, int] = {}


def reached(point: str) -> None:
    """Count one occurrence of `point`; pause for good when it is the one STREAMJOB_PAUSE_AT names."""
    wanted = os.environ.get(PAUSE_AT)
    if not wanted or not wanted.startswith(point + ":"):
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        hit = wanted == f"{point}:{_counts[point]}"
    if not hit:
        return
    directory = Path(os.environ.get(PAUSE_DIR, "."))
    tmp = directory / "paused.tmp"
    tmp.write_text(f"{wanted}\n")
    tmp.replace(directory / "paused")
    while True:
        time.sleep(60)
