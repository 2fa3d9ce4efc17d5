"""Once a stop-savepoint's manifest PUT was attempted, the driver never runs its query again.

Two drivers in turn on one checkpoint, each asked to stop with a savepoint, each with a
fault injected at the manifest (job_runtime.testhooks, STREAMJOB_FAIL_AT):

- the PUT fails, nothing is stored: the driver exits FAILED without starting its query
  again, so the checkpoint's latest committed batch is the one it had when it stopped;
- the manifest is stored but the call raises (a lost response; the in-progress marker
  not deleted): the driver exits STOPPED_FOR_SAVEPOINT with the savepoint COMPLETED, and
  the savepoint's batch is the checkpoint's latest committed batch: the savepoint the
  operator then restores is never behind the job.

Before this rule, both drivers reported the savepoint FAILED, started the query again
and committed more batches behind a savepoint that (in the second case) existed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import Input

from job_runtime.savepoints import IN_PROGRESS_MARKER, MANIFEST_NAME
from streamjob_contract import checkpoint as ckpt
from streamjob_contract.exitcodes import ExitCode

SLOW_TRIGGER = "1 second"
EXIT_SECONDS = 90  # a driver that started its query again keeps running far past this


def latest_committed(checkpoint: Path) -> int | None:
    return ckpt.latest_committed(p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*") if p.is_file())


def stop_with_savepoint(proc: RuntimeProcess, target: Path) -> None:
    proc.wait_for("a running query past batch 1", lambda s: s["state"] == "RUNNING" and (s["latestCompletedBatch"] or -1) >= 1)
    code, accepted = proc.request("POST", "/savepoints", {"path": target.as_uri(), "stop": True})
    assert code == 202, accepted


def test_no_query_restart_once_the_manifest_put_was_attempted(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    job = example_job("entrypoint", events.directory, tmp_path / "out", tmp_path / "job.json")
    checkpoint, savepoints = tmp_path / "ckpt", tmp_path / "savepoints"
    args = run_args(job, checkpoint.as_uri(), trigger=SLOW_TRIGGER, extra=("--savepoint-location", savepoints.as_uri()))

    # 1. The PUT fails: no savepoint, and the driver ends instead of committing on.
    first = RuntimeProcess(
        tmp_path / "first", args, env=runtime_env({"STREAMJOB_FAIL_AT": "savepoint-manifest-put:1"}), label="first"
    )
    processes.append(first.start())
    lost = savepoints / "lost"
    stop_with_savepoint(first, lost)
    started = time.monotonic()
    assert first.wait(EXIT_SECONDS) == ExitCode.FAILED, first.log_tail()
    ended = first.termination()
    assert ended["outcome"] == "failed" and ended["savepoint"]["state"] == "FAILED", ended
    assert "not started again" in ended["message"], ended
    assert "injected fault at savepoint-manifest-put:1" in ended["savepoint"]["error"], ended
    assert not (lost / MANIFEST_NAME).exists()
    assert "restarting the query" not in first.log_text()
    at_exit = latest_committed(checkpoint)
    assert at_exit is not None
    time.sleep(max(0.0, 3 - (time.monotonic() - started)))  # a trigger or two: nothing commits after the exit
    assert latest_committed(checkpoint) == at_exit

    # 2. The manifest is stored, the call raises: the savepoint is complete and nothing is behind it.
    second = RuntimeProcess(
        tmp_path / "second", args, env=runtime_env({"STREAMJOB_FAIL_AT": "savepoint-manifest-response:1"}), label="second"
    )
    processes.append(second.start())
    kept = savepoints / "kept"
    stop_with_savepoint(second, kept)
    assert second.wait(EXIT_SECONDS) == ExitCode.STOPPED_FOR_SAVEPOINT, second.log_tail()
    ended = second.termination()
    assert ended["outcome"] == "stoppedForSavepoint" and ended["savepoint"]["state"] == "COMPLETED", ended
    manifest = json.loads((kept / MANIFEST_NAME).read_text())
    assert (kept / IN_PROGRESS_MARKER).exists(), "the fault left the marker: the case this test is about"
    assert ended["savepoint"]["batchId"] == manifest["batch_id"] == latest_committed(checkpoint), (ended, manifest)
    assert "restarting the query" not in second.log_text()
