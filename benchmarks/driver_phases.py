"""Where a driver's start goes: the runtime's own log lines, timed, between its pod's creation and its first batches.

The runtime logs each start-up step once (``job_runtime/run/runner.py`` ``_run``, in this order): the
checkpoint's owner checked or claimed, the driver's epoch taken, the checkpoint listed and repaired,
the state partitions checked, then the Spark session built and the query started. The first batch
committed (and the first one the previous driver had not committed) come from the checkpoint's
``commits/`` objects in S3, which the benchmark passes in. Log times are the driver's wall clock
(``%(asctime)s``, milliseconds, UTC on the test bed), S3's are whole seconds: read tenths, not hundredths.
"""

from __future__ import annotations

import re
import statistics
from datetime import datetime, timezone

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \S+: (.*)$")

# (phase key, what the reader is told the phase holds, the log message that ends it)
PHASES = [
    ("process", "pod created -> the runtime's first log line (container start, Python imports)", None),
    ("checkpoint", "-> checkpoint checked (owner, epoch, listing and repair, state partitions; S3 calls)",
     re.compile(r"^(claimed checkpoint|checked checkpoint|took checkpoint epoch|recovered checkpoint|checked state partitions"
                r"|restored savepoint) ")),
    ("query", "-> query started (JVM, Spark session, job's plan)", re.compile(r"^started query ")),
    ("first_batch", "-> first batch committed (on a recovery: the batch the kill interrupted, re-run)", None),
    ("new_batch", "-> first batch the previous driver had not committed", None),
]


def log_times(log: str) -> list[tuple[float, str]]:
    """(epoch seconds, message) for each of the runtime's own log lines."""
    out = []
    for line in log.splitlines():
        m = STAMP.match(line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
            out.append((when.timestamp(), m.group(2)))
    return out


def breakdown(created: float, log: str, first_batch: float, new_batch: float) -> dict[str, float]:
    """Seconds spent in each phase of PHASES (its end minus the previous one's); missing milestones are left out."""
    lines = log_times(log)
    ends: dict[str, float] = {"first_batch": first_batch, "new_batch": new_batch}
    if lines:
        ends["process"] = lines[0][0]
    started = next((t for t, msg in lines if PHASES[2][2] and PHASES[2][2].match(msg)), None)
    if started is not None:
        ends["query"] = started
        checks = [t for t, msg in lines if PHASES[1][2] and PHASES[1][2].match(msg) and t <= started]
        if checks:
            ends["checkpoint"] = checks[-1]  # the last check before the query: they run in a fixed order
    return _seconds(created, ends, [key for key, _, _ in PHASES])


def _seconds(start: float, ends: dict[str, float], keys: list[str]) -> dict[str, float]:
    """Each phase's seconds: its end minus the previous one's, in the order of `keys` (missing ones left out)."""
    out, previous = {}, start
    for key in keys:
        if key in ends:
            out[key] = max(0.0, ends[key] - previous)
            # never back in time: a milestone seen before the previous one (a commit copied at start) adds
            # nothing, and the next phase counts from the later one, so the phases add up to the total
            previous = max(previous, ends[key])
    return out


# A warm-standby handover, from the old driver's last commit to the standby's first: (key, label, whose log line
# ends it, the message). The old driver's lines come from its log, the standby's from its own.
HANDOVER = [
    ("savepoint", "last commit of the old driver -> its savepoint completed (stop, final batch, manifest)",
     "old", re.compile(r"^(completed savepoint|stopped for savepoint) ")),  # a stop with a savepoint logs the second
    ("release", "-> the standby released (the operator sees the savepoint, deletes the old driver, waits for it "
     "to go, releases)", "standby", re.compile(r"^accepted release ")),
    ("restore", "-> the standby's query started (restore, checkpoint claimed, epoch, query)", "standby",
     re.compile(r"^started query ")),
    ("first_batch", "-> the standby's first new batch committed", None, None),
]


def handover(last_old: float, old_log: str, standby_log: str, first_new: float) -> dict[str, float]:
    """Seconds in each HANDOVER phase; a milestone whose line is missing is left out (its time goes to the next)."""
    logs = {"old": log_times(old_log), "standby": log_times(standby_log)}
    ends: dict[str, float] = {"first_batch": first_new}
    for key, _, whose, pattern in HANDOVER:
        if whose is not None and pattern is not None:
            found = [t for t, msg in logs[whose] if pattern.match(msg)]
            if found:
                ends[key] = found[-1] if whose == "old" else found[0]
    return _seconds(last_old, ends, [key for key, _, _, _ in HANDOVER])


def handover_table(runs: list[dict[str, float]]) -> str:
    """A markdown table of the handover phases (medians over the runs)."""
    return table({"warm-standby upgrade": runs}, [(key, label) for key, label, _, _ in HANDOVER],
                 "last commit of the old driver -> first of the standby")


def table(columns: dict[str, list[dict[str, float]]], phases: list[tuple[str, str]] | None = None,
          total: str = "pod created -> first new batch") -> str:
    """A markdown table: one row per phase (PHASES unless given), one column per kind of start (medians over its rounds)."""
    head = "| phase (seconds, medians) | " + " | ".join(columns) + " |\n| --- |" + " ---: |" * len(columns) + "\n"
    rows = []
    for key, label in phases or [(key, label) for key, label, _ in PHASES]:
        cells = []
        for runs in columns.values():
            values = [r[key] for r in runs if key in r]
            cells.append(f"{statistics.median(values):.1f}" if values else "-")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    totals = [f"{statistics.median([sum(r.values()) for r in runs]):.1f}" if runs else "-" for runs in columns.values()]
    return head + "\n".join(rows) + f"\n| **{total}** | " + " | ".join(totals) + " |\n"
