"""Savepoints through the control endpoint, with restores in new processes.

- stop-with-savepoint in the middle of the stream (after a savepoint that
  failed and must not have cost the running job), restore in a new process,
  finish: the combined output equals the reference;
- a savepoint taken while the job runs is consistent: the first job's output
  up to the savepoint's batch plus the restored job's output equals the
  reference; the first job then stops on SIGTERM with exit 11, and the
  restored job, killed once and restarted with the same --restore-from,
  resumes its own checkpoint instead of restoring again;
- the endpoint refuses requests without the right token and answers health.
"""

from __future__ import annotations

import time
from pathlib import Path

import runtime_outputs as outputs
from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import FILES, Input

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RunState
from job_runtime.savepoints import MANIFEST_NAME

SLOW_TRIGGER = "1 second"  # at most one batch a second: the stream is still going when the savepoint comes


def wait_savepoint(proc: RuntimeProcess, savepoint_id: str, timeout: float = 180) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = proc.request("GET", f"/savepoints/{savepoint_id}")
        assert code == 200, (code, body)
        if body["state"] != "IN_PROGRESS":
            return body
        time.sleep(0.2)
    raise AssertionError(f"savepoint {savepoint_id} still in progress after {timeout}s\n{proc.log_tail()}")


def test_stop_with_savepoint_then_restore_in_a_new_process(events: Input, processes: list[RuntimeProcess], tmp_path: Path) -> None:
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

    # A savepoint that cannot be written: the job must keep running from its checkpoint.
    savepoints.mkdir()
    blocker = savepoints / "not-a-directory"  # inside the savepoint location: accepted, then fails to write
    blocker.write_text("")
    code, accepted = first.request("POST", "/savepoints", {"path": (blocker / "sp").as_uri(), "stop": True})
    assert code == 202, accepted
    failed = wait_savepoint(first, str(accepted["id"]))
    assert failed["state"] == "FAILED" and failed["error"], failed
    running = first.wait_for("the restarted query", lambda s: s["state"] == RunState.RUNNING and s["queryStarts"] == 2)
    before = running["latestCompletedBatch"]
    first.wait_for("progress after the failed savepoint", lambda s: s["latestCompletedBatch"] > before)

    code, accepted = first.request("POST", "/savepoints", {"stop": True})
    assert code == 202, accepted
    path = str(accepted["path"])
    assert path.startswith(savepoints.as_uri())
    assert first.wait(300) == ExitCode.STOPPED_FOR_SAVEPOINT, first.log_tail()
    ended = first.termination()
    assert ended["outcome"] == "stoppedForSavepoint"
    assert ended["savepoint"]["state"] == "COMPLETED" and ended["savepoint"]["path"] == path
    batch = ended["savepoint"]["batchId"]
    assert 1 <= batch < FILES - 1, f"savepoint at batch {batch}: not in the middle of the stream"
    assert (Path(path.removeprefix("file://")) / MANIFEST_NAME).exists()

    second = RuntimeProcess(tmp_path / "second", run_args(job, (tmp_path / "ckpt2").as_uri(), extra=("--restore-from", path)), label="second")
    processes.append(second.start())
    assert second.wait(400) == 0, second.log_tail()
    assert "restored savepoint" in second.log_text()
    assert outputs.file_sink_rows(out) == events.tumbling(events.recorded_plan(tmp_path / "ckpt2"))


def test_savepoint_while_running_restores_consistently(events: Input, processes: list[RuntimeProcess], tmp_path: Path) -> None:
    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    first = RuntimeProcess(
        tmp_path / "first",
        run_args(
            example_job("session", events.directory, out1, tmp_path / "job1.json"), (tmp_path / "ckpt1").as_uri(),
            trigger=SLOW_TRIGGER, extra=("--savepoint-location", tmp_path.as_uri()),
        ),
        label="first",
    )
    processes.append(first.start())

    # The endpoint: health needs no token, everything else needs the right one.
    code, health = first.request("GET", "/healthz", token=None)
    assert code == 200 and health["state"] in (RunState.STARTING, RunState.RUNNING), health
    assert first.request("GET", "/status", token=None)[0] == 401
    assert first.request("GET", "/status", token="wrong-token")[0] == 401
    assert first.request("POST", "/savepoints", {"stop": True}, token="wrong-token")[0] == 401
    assert first.request("POST", "/stop", token=None)[0] == 401

    first.wait_for("two committed batches", lambda s: (s["latestCompletedBatch"] or -1) >= 2)
    savepoint = tmp_path / "running-savepoint"
    code, accepted = first.request("POST", "/savepoints", {"path": savepoint.as_uri(), "stop": False})
    assert code == 202, accepted
    done = wait_savepoint(first, str(accepted["id"]))
    assert done["state"] == "COMPLETED", done
    batch = int(done["batchId"])  # type: ignore[arg-type]
    status = first.wait_for("progress past the savepoint", lambda s: (s["latestCompletedBatch"] or -1) > batch)
    assert status["state"] == RunState.RUNNING and status["queryStarts"] == 1
    assert status["queryId"] and status["runId"] and status["lastBatchId"] is not None
    assert status["watermark"].startswith("2024-01-01T") and status["stateRows"] > 0 and status["stateMemoryBytes"] > 0
    assert status["batchDurationMs"] > 0 and status["inputRowsPerSecond"] is not None and status["lastError"] is None
    assert status["lastSavepoint"]["id"] == accepted["id"]
    assert batch < FILES - 1, f"savepoint at batch {batch}: not in the middle of the stream"

    first.terminate()
    assert first.wait(120) == ExitCode.STOPPED_BY_REQUEST, first.log_tail()
    assert first.termination()["outcome"] == "stoppedByRequest"

    job2 = example_job("session", events.directory, out2, tmp_path / "job2.json")
    args2 = run_args(job2, (tmp_path / "ckpt2").as_uri(), trigger=SLOW_TRIGGER, extra=("--restore-from", savepoint.as_uri()))
    second = RuntimeProcess(tmp_path / "second", args2, label="second")
    processes.append(second.start())
    second.wait_for("a batch after the restore", lambda s: (s["latestCompletedBatch"] or -1) >= batch + 2)
    second.kill()
    third = RuntimeProcess(tmp_path / "third", args2[:-2] + ["--trigger-interval", "available-now"] + args2[-2:], label="third")
    processes.append(third.start())
    assert third.wait(400) == 0, third.log_tail()
    assert "skipped restore" in third.log_text()

    combined = outputs.foreach_batch_rows(out1, range(0, batch + 1)) + outputs.foreach_batch_rows(out2)
    assert min(outputs.batch_dirs(out2)) == batch + 1
    assert combined == events.sessions(events.recorded_plan(tmp_path / "ckpt2"))
