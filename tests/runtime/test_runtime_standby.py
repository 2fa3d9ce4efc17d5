"""A warm standby (--standby) as a real process next to the running driver.

The standby builds its session, checks the job and reports STANDBY while the first driver
runs on unfenced; it creates nothing at its checkpoint location and takes no epoch, and
refuses savepoints. Released (POST /release) with the first driver's stop-savepoint, it
restores it and runs the job to its end: the combined output equals the reference. A
repeated release is answered again; a release with another savepoint, or of a driver that
is not a standby, is refused.
"""

from __future__ import annotations

from pathlib import Path

import runtime_outputs as outputs
from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import Input

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RunState

SLOW_TRIGGER = "1 second"


def test_a_standby_waits_without_touching_its_checkpoint_then_restores_the_released_savepoint(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    job = example_job("entrypoint", events.directory, out, tmp_path / "job.json")
    savepoints = tmp_path / "savepoints"
    first = RuntimeProcess(
        tmp_path / "first",
        run_args(job, (tmp_path / "ckpt1").as_uri(), trigger=SLOW_TRIGGER, extra=("--savepoint-location", savepoints.as_uri())),
        label="first",
    )
    processes.append(first.start())
    first.wait_for("a committed batch", lambda s: (s["latestCompletedBatch"] or -1) >= 1)

    ckpt2 = tmp_path / "ckpt2"
    standby = RuntimeProcess(tmp_path / "standby", run_args(job, ckpt2.as_uri(), extra=("--standby",)), label="standby")
    processes.append(standby.start())
    standby.wait_for("STANDBY", lambda s: s["state"] == RunState.STANDBY)
    assert standby.request("POST", "/savepoints", {"stop": True})[0] == 409  # a standby has nothing to save
    # the first driver is not fenced by the standby: the same query run, still RUNNING (its input is finite,
    # so it may have nothing left to commit)
    running = first.status()
    assert running["state"] == RunState.RUNNING and running["queryStarts"] == 1 and not running["lastError"], running
    assert not ckpt2.exists(), f"the standby wrote to its checkpoint before the release: {list(ckpt2.rglob('*'))}"
    assert first.request("POST", "/release", {"restoreFrom": savepoints.as_uri()})[0] == 409  # not a standby

    code, accepted = first.request("POST", "/savepoints", {"stop": True})
    assert code == 202, accepted
    path = str(accepted["path"])
    assert first.wait(300) == ExitCode.STOPPED_FOR_SAVEPOINT, first.log_tail()

    code, released = standby.request("POST", "/release", {"restoreFrom": path})
    assert code == 202, released
    assert standby.request("POST", "/release", {"restoreFrom": path})[0] == 202  # a retried release
    assert standby.request("POST", "/release", {"restoreFrom": path + "-other"})[0] == 409
    assert standby.wait(400) == 0, standby.log_tail()
    assert "restored savepoint" in standby.log_text()
    # the first Spark tasks were run before STANDBY (job_runtime.run.warmup); files, not S3: no client, no S3A
    warmed = [line for line in standby.log_text().splitlines() if "warmed standby" in line]
    assert warmed and "tasks=ok" in warmed[0] and "s3Client" not in warmed[0], warmed
    assert outputs.file_sink_rows(out) == events.tumbling(events.recorded_plan(ckpt2))
