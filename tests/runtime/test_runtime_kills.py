"""Exactly-once under hard kills: SIGKILL the driver (and its JVM) at varied points, restart, compare.

Each run is a new runtime process on the same checkpoint with a bounded
trigger; the kill takes the whole process group, as a pod kill would, while
the JVM is starting, right after the query starts (re-running the batch the
write-ahead log left planned), or at varied delays after a commit (in the
middle of a batch or of its commit). The file sink's committed output after
the final run must equal the reference exactly: nothing lost, nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import runtime_outputs as outputs
from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import Input

from streamjob_contract.runtime_status import RunState

Check = Callable[[dict[str, Any]], bool]


def committed(n: int) -> Check:
    return lambda s: (s["latestCompletedBatch"] if s["latestCompletedBatch"] is not None else -1) >= n


STARTING: Check = lambda s: True  # noqa: E731 - the endpoint answers before the JVM is up
QUERY_STARTED: Check = lambda s: s["state"] == RunState.RUNNING  # noqa: E731

# (when, then wait seconds): 5 kills spread over the stream of 11 batches (10 files + a no-data batch).
KILLS: list[tuple[str, Check, float]] = [
    ("while the JVM starts", STARTING, 0.0),
    ("as the query starts", QUERY_STARTED, 0.0),
    ("right after batch 1 committed", committed(1), 0.0),
    ("0.7 s after batch 3 committed", committed(3), 0.7),
    ("1.5 s after batch 5 committed", committed(5), 1.5),
]


def run_with_kills(events: Input, processes: list[RuntimeProcess], tmp_path: Path, kills: list[tuple[str, Check, float]]) -> None:
    out = tmp_path / "out"
    job = example_job("sliding", events.directory, out, tmp_path / "job.json")
    args = run_args(job, (tmp_path / "ckpt").as_uri())
    history = []
    for i, (what, when, delay) in enumerate(kills):
        proc = RuntimeProcess(tmp_path / "runs", args, label=f"run{i}")
        processes.append(proc.start())
        status = proc.wait_for(what, when)
        time.sleep(delay)
        proc.kill()
        history.append(f"killed {what} (latestCompletedBatch={status.get('latestCompletedBatch')})")
    final = RuntimeProcess(tmp_path / "runs", args, label="final")
    processes.append(final.start())
    assert final.wait(600) == 0, final.log_tail()
    got = outputs.file_sink_rows(out)
    # A restart may re-run a batch without its watermark advance (see runtime_reference): the
    # oracle replays the batches and watermarks Spark recorded, and counts every row once.
    expected = events.sliding(events.recorded_plan(tmp_path / "ckpt"))
    assert got == expected, (
        "\n".join(history) + f"\nduplicated or wrong: {sorted((got - expected).items())}\nmissing: {sorted((expected - got).items())}"
    )


def test_sigkill_at_five_points_then_exactly_once(events: Input, processes: list[RuntimeProcess], tmp_path: Path) -> None:
    run_with_kills(events, processes, tmp_path, KILLS)
