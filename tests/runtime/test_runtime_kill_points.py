"""Exactly-once under SIGKILL at named instants, hit deterministically with the pause hooks.

Each run is a new runtime process on the same checkpoint; it pauses at one
instant (tests/runtime/pause_points.py), the test checks that the instant left
what it should, and kills the process group as a pod kill would. The last run
finishes the stream; the file sink's committed output must equal the reference.

- the checkpoint's instants: the first offset-log entry half written (the
  leftover that bricked jobs: STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), a state
  store commit with one partition committed, an offset-log entry written before
  its batch ran, a batch whose sink and state committed before its commit-log entry;
- the savepoint's: a running savepoint half copied, a stop-with-savepoint half
  copied, a restore half copied; with ownership markers on both checkpoints.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import runtime_outputs as outputs
from pause_points import PausePoint, jvm_hook_args
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import Input

from job_runtime.exitcodes import ExitCode
from job_runtime.ownership import OWNER_FILE
from job_runtime.savepoint import MANIFEST_NAME, RESTORE_MARKER

FIRST_OFFSETS = PausePoint(r"write:/ckpt/offsets/0$", "while the first offset-log entry was written")
STATE_COMMIT = PausePoint(r"close:/ckpt/state/0/0/2\.changelog$", "in batch 1's state commit (partition 0 done, partition 1 not)")
OFFSETS_LOGGED = PausePoint(r"close:/ckpt/offsets/3$", "after offsets/3 was written, before batch 3 ran")
BEFORE_COMMIT = PausePoint(r"open:/ckpt/commits/5$", "after batch 5's sink and state committed, before commits/5")


def files_under(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def pause_then_kill(proc: RuntimeProcess, processes: list[RuntimeProcess], point: PausePoint, pause_dir: Path) -> str:
    processes.append(proc.start())
    where = proc.wait_paused(pause_dir)
    proc.kill()
    return where


def test_sigkill_at_checkpoint_instants_then_exactly_once(
    events: Input, processes: list[RuntimeProcess], pause_jar: Path, tmp_path: Path
) -> None:
    ckpt, out, pauses = tmp_path / "ckpt", tmp_path / "out", tmp_path / "pauses"
    job = example_job("sliding", events.directory, out, tmp_path / "job.json")
    args = run_args(job, ckpt.as_uri(), extra=jvm_hook_args(pause_jar))
    runs = tmp_path / "runs"

    def run(point: PausePoint) -> RuntimeProcess:
        proc = RuntimeProcess(runs, args, env=runtime_env(point.env(pauses)), label=f"run-{len(processes)}")
        where = pause_then_kill(proc, processes, point, pauses)
        assert re.search(point.spec.split(":", 1)[1], where), (point.what, where)
        return proc

    run(FIRST_OFFSETS)
    left = files_under(ckpt)
    # exactly the reported leftover: a hidden temporary offsets entry and its checksum, no entry, no commit
    assert [p for p in left if p.startswith("offsets/")] and all(
        re.fullmatch(r"offsets/\.{1,2}0\.[0-9a-f-]+\.tmp(\.crc)?", p) for p in left if p.startswith("offsets/")
    ), left
    assert not any(p.startswith("commits/") for p in left) and "metadata" in left, left

    second = run(STATE_COMMIT)
    assert "removed checkpoint leftover" in second.log_text() and "offsets/.0." in second.log_text(), second.log_tail()
    left = files_under(ckpt)
    assert "state/0/0/2.changelog" in left and "commits/1" not in left, sorted(left)

    run(OFFSETS_LOGGED)
    left = files_under(ckpt)
    assert "offsets/3" in left and "commits/2" in left and "commits/3" not in left, sorted(left)

    run(BEFORE_COMMIT)
    assert (out / "_spark_metadata" / "5").exists() and not (ckpt / "commits" / "5").exists()

    final = RuntimeProcess(runs, args, label="final")
    processes.append(final.start())
    assert final.wait(600) == ExitCode.FINISHED, final.log_tail()
    assert not (ckpt / OWNER_FILE).exists(), "without --owner-uid the runtime claims nothing"
    got = outputs.file_sink_rows(out)
    expected = events.sliding(events.recorded_plan(ckpt))
    assert got == expected, f"duplicated or wrong: {sorted((got - expected).items())}\nmissing: {sorted((expected - got).items())}"


SLOW_TRIGGER = "1 second"


def committed_past(proc: RuntimeProcess, batch: int) -> int:
    status = proc.wait_for(f"a commit after batch {batch}", lambda s: (s["latestCompletedBatch"] or -1) > batch)
    return int(status["latestCompletedBatch"])


def test_sigkill_during_savepoints_and_restore_then_exactly_once(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    ckpt1, ckpt2, out, pauses = tmp_path / "ckpt1", tmp_path / "ckpt2", tmp_path / "out", tmp_path / "pauses"
    job = example_job("entrypoint", events.directory, out, tmp_path / "job.json")
    first_uid, second_uid = "uid-first-1111", "uid-second-2222"
    args1 = run_args(job, ckpt1.as_uri(), trigger=SLOW_TRIGGER, extra=("--owner-uid", first_uid))
    runs = tmp_path / "runs"

    # 1. a savepoint of the running job, killed half copied
    running = PausePoint("savepoint:2", "a running savepoint, two files copied")
    proc = RuntimeProcess(runs, args1, env=runtime_env(running.env(pauses)), label="running-savepoint")
    processes.append(proc.start())
    batch = committed_past(proc, 0)
    half = tmp_path / "sp-running"
    code, accepted = proc.request("POST", "/savepoints", {"path": half.as_uri(), "stop": False})
    assert code == 202, accepted
    proc.wait_paused(pauses)
    proc.kill()
    assert half.is_dir() and not (half / MANIFEST_NAME).exists()
    assert json.loads((ckpt1 / OWNER_FILE).read_text())["uid"] == first_uid

    # 2. a stop-with-savepoint, killed half copied (the query was already stopped)
    stopping = PausePoint("savepoint:3", "a stop-with-savepoint, three files copied")
    proc = RuntimeProcess(runs, args1, env=runtime_env(stopping.env(pauses)), label="stop-savepoint")
    processes.append(proc.start())
    batch = committed_past(proc, batch)
    half_stop = tmp_path / "sp-stop"
    code, accepted = proc.request("POST", "/savepoints", {"path": half_stop.as_uri(), "stop": True})
    assert code == 202, accepted
    proc.wait_paused(pauses)
    proc.kill()
    assert not (half_stop / MANIFEST_NAME).exists()

    # 3. the same job again: a stop-with-savepoint that completes
    proc = RuntimeProcess(runs, args1, label="complete-savepoint")
    processes.append(proc.start())
    committed_past(proc, batch)
    savepoint = tmp_path / "sp-complete"
    code, accepted = proc.request("POST", "/savepoints", {"path": savepoint.as_uri(), "stop": True})
    assert code == 202, accepted
    assert proc.wait(300) == ExitCode.STOPPED_FOR_SAVEPOINT, proc.log_tail()
    manifest = json.loads((savepoint / MANIFEST_NAME).read_text())
    assert not (savepoint / OWNER_FILE).exists() and all(not f["path"].startswith("_streamjob") for f in manifest["files"])

    # refused before any JVM: a half-copied savepoint, and a checkpoint another job owns
    refused = RuntimeProcess(runs, run_args(job, (tmp_path / "never").as_uri(), extra=("--restore-from", half_stop.as_uri())), label="half")
    processes.append(refused.start())
    assert refused.wait(120) == ExitCode.RESTORE_REFUSED and MANIFEST_NAME in refused.log_text(), refused.log_tail()
    intruder = RuntimeProcess(runs, run_args(job, ckpt1.as_uri(), name="other", extra=("--owner-uid", second_uid)), label="intruder")
    processes.append(intruder.start())
    assert intruder.wait(120) == ExitCode.RESTORE_REFUSED, intruder.log_tail()
    message = intruder.termination()["message"]
    assert f"is owned by StreamJob tests/job (uid {first_uid})" in message and str(ckpt1) in message, message

    # 4. another job restores the savepoint into its own checkpoint: killed half copied, then finished
    restore_args = run_args(job, ckpt2.as_uri(), extra=("--restore-from", savepoint.as_uri(), "--owner-uid", second_uid))
    restoring = PausePoint("restore:4", "a restore, four files copied")
    proc = RuntimeProcess(runs, restore_args, env=runtime_env(restoring.env(pauses)), label="restore")
    processes.append(proc.start())
    proc.wait_paused(pauses)
    proc.kill()
    assert (ckpt2 / RESTORE_MARKER).exists()
    assert json.loads((ckpt2 / OWNER_FILE).read_text())["uid"] == second_uid

    final = RuntimeProcess(runs, restore_args, label="final")
    processes.append(final.start())
    assert final.wait(600) == ExitCode.FINISHED, final.log_tail()
    assert "restored savepoint" in final.log_text() and "skipped checkpoint recovery" in final.log_text()
    assert json.loads((ckpt2 / OWNER_FILE).read_text())["uid"] == second_uid and not (ckpt2 / RESTORE_MARKER).exists()
    got = outputs.file_sink_rows(out)
    expected = events.tumbling(events.recorded_plan(ckpt2))
    assert got == expected, f"duplicated or wrong: {sorted((got - expected).items())}\nmissing: {sorted((expected - got).items())}"
