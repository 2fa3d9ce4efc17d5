"""Exactly-once under SIGKILL at named instants, hit deterministically with the pause hooks.

One job's life on one checkpoint: each run is a new runtime process that pauses
at one instant (tests/runtime/pause_points.py); the test checks that the instant
left what it should and kills the process group, as a pod kill would. Instants:

- the first offset-log entry half written: the leftover that bricked restarts
  with STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY;
- a state store commit with one partition committed and the batch not;
- a stop-with-savepoint half copied;
- at once, a running savepoint half copied and a batch whose offsets, sink output
  and state are written but not its commit (then a savepoint of exactly that: the
  restore re-runs a batch the file sink skips as written);
- a restore (by another job, into its own checkpoint) half copied.

Between them: two refusals that need no JVM (a half-copied savepoint, a checkpoint
owned by another job). The job deduplicates then counts per window (two stateful
operators, tests/runtime/jobs/operator_changes.py); the job that restores its
savepoint only counts, with --allow-non-restored-state: Spark refuses its first
start, the runtime drops the deduplication's state and starts it again. It
finishes the stream; the file sink's committed output must equal the reference,
which holds only if the window counts kept their state across the upgrade.
The refusals of operator changes are in tests/savepoints/test_nonrestored_state.py
and in the decision table of test_runtime_recovery_rules.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import runtime_outputs as outputs
from pause_points import PausePoint, jvm_hook_args, pause_env
from runtime_harness import RuntimeProcess, entrypoint_job, run_args, runtime_env
from runtime_inputs import Input

from streamjob_contract.exitcodes import ExitCode
from job_runtime.checkpoints.ownership import OWNER_FILE
from job_runtime.savepoints import MANIFEST_NAME, RESTORE_MARKER, write_savepoint

FIRST_OFFSETS = PausePoint(r"write:/ckpt1/offsets/0$", "while the first offset-log entry was written")
STATE_COMMIT = PausePoint(r"close:/ckpt1/state/0/0/2\.changelog$", "in batch 1's state commit (partition 0 done, partition 1 not)")


def files_under(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()}


SLOW_TRIGGER = "500 milliseconds"  # batches keep coming while savepoints are requested


def committed_past(proc: RuntimeProcess, batch: int) -> int:
    status = proc.wait_for(f"a commit after batch {batch}", lambda s: (s["latestCompletedBatch"] or -1) > batch)
    return int(status["latestCompletedBatch"])


def test_sigkill_at_named_instants_then_exactly_once(
    events: Input, processes: list[RuntimeProcess], pause_jar: Path, tmp_path: Path
) -> None:
    """One job's life, killed at each instant in turn; the restored job's output is checked at the end."""
    ckpt1, ckpt2, out, pauses = tmp_path / "ckpt1", tmp_path / "ckpt2", tmp_path / "out", tmp_path / "pauses"
    keys = [(e.user, e.ts_ms, e.amount) for batch in events.batches for e in batch]
    assert len(keys) == len(set(keys)), "the input has no duplicates: the deduplication changes nothing"
    job = entrypoint_job("dedup_then_count", events.directory, out, tmp_path / "job.json")
    first_uid, second_uid = "uid-first-1111", "uid-second-2222"
    args1 = run_args(
        job, ckpt1.as_uri(), trigger=SLOW_TRIGGER,
        extra=("--owner-uid", first_uid, "--savepoint-location", tmp_path.as_uri(), *jvm_hook_args(pause_jar)),
    )
    runs = tmp_path / "runs"

    def start(*points: PausePoint, args: list[str] = args1) -> RuntimeProcess:
        env = runtime_env(pause_env(list(points), pauses)) if points else runtime_env()
        proc = RuntimeProcess(runs, args, env=env, label=f"run-{len(processes)}")
        processes.append(proc.start())
        return proc

    def pause_then_kill(proc: RuntimeProcess, *points: PausePoint) -> list[str]:
        where = proc.wait_paused(pauses, points=len(points)).splitlines()
        for point, paused in zip(points, where):
            if not point.spec.split(":", 1)[1].isdigit():
                assert re.search(point.spec.split(":", 1)[1], paused), (point.what, paused)
        proc.kill()
        return where

    # 1. the first offset-log entry half written: exactly the leftover that bricked restarts
    pause_then_kill(start(FIRST_OFFSETS), FIRST_OFFSETS)
    left = files_under(ckpt1)
    offsets = [p for p in left if p.startswith("offsets/")]
    assert offsets and all(re.fullmatch(r"offsets/\.{1,2}0\.[0-9a-f-]+\.tmp(\.crc)?", p) for p in offsets), left
    assert not any(p.startswith("commits/") for p in left) and "metadata" in left, left

    # 2. a state store commit with one partition committed (the restart removes the leftover of 1)
    proc = start(STATE_COMMIT)
    pause_then_kill(proc, STATE_COMMIT)
    assert "removed checkpoint leftover" in proc.log_text() and "offsets/.0." in proc.log_text(), proc.log_tail()
    left = files_under(ckpt1)
    assert "state/0/0/2.changelog" in left and "commits/1" not in left, sorted(left)
    assert json.loads((ckpt1 / OWNER_FILE).read_text())["uid"] == first_uid

    # 3. a stop-with-savepoint, half copied (the query was already stopped)
    stopping = PausePoint("savepoint:3", "a stop-with-savepoint, three files copied")
    proc = start(stopping)
    committed_past(proc, 0)
    half_stop = tmp_path / "sp-stop"
    code, accepted = proc.request("POST", "/savepoints", {"path": half_stop.as_uri(), "stop": True})
    assert code == 202, accepted
    pause_then_kill(proc, stopping)
    assert half_stop.is_dir() and not (half_stop / MANIFEST_NAME).exists()

    # 4. at once: a running savepoint half copied, and a batch whose offsets, sink output and
    #    state are written but not its commit-log entry (the savepoint copy and the query both paused)
    latest = max(int(p.name) for p in (ckpt1 / "commits").iterdir() if p.name.isdigit())
    planned = latest + 2
    running = PausePoint("savepoint:2", "a running savepoint, two files copied")
    before_commit = PausePoint(rf"open:/ckpt1/commits/{planned}$", f"batch {planned} ran, commits/{planned} not written")
    proc = start(running, before_commit)
    committed_past(proc, latest)
    half = tmp_path / "sp-running"
    code, accepted = proc.request("POST", "/savepoints", {"path": half.as_uri(), "stop": False})
    assert code == 202, accepted
    pause_then_kill(proc, running, before_commit)
    assert half.is_dir() and not (half / MANIFEST_NAME).exists()
    assert (out / "_spark_metadata" / str(planned)).exists() and not (ckpt1 / "commits" / str(planned)).exists()
    assert (ckpt1 / "offsets" / str(planned)).exists() and (ckpt1 / "state" / "0" / "0" / f"{planned + 1}.changelog").exists()

    # a savepoint of exactly that, written offline (streamjob-savepoints create)
    savepoint = tmp_path / "sp-complete"
    write_savepoint(
        ckpt1.as_uri(), savepoint.as_uri(), job_name="job", job_namespace="tests", job_hash="", spark_version="4.3.0"
    )
    manifest = json.loads((savepoint / MANIFEST_NAME).read_text())
    assert manifest["planned_batch_id"] == planned, manifest["planned_batch_id"]
    # the restore re-runs the planned batch, the file sink skips it as written: the state it wrote must come along
    assert f"state/0/0/{planned + 1}.changelog" in {f["path"] for f in manifest["files"]}
    assert not (savepoint / OWNER_FILE).exists() and all(not f["path"].startswith("_streamjob") for f in manifest["files"])

    # refused before any JVM starts: a half-copied savepoint, and a checkpoint another job owns
    refused = start(args=run_args(job, (tmp_path / "never").as_uri(), extra=("--restore-from", half_stop.as_uri())))
    assert refused.wait(120) == ExitCode.RESTORE_REFUSED and MANIFEST_NAME in refused.log_text(), refused.log_tail()
    intruder = start(args=run_args(job, ckpt1.as_uri(), name="other", extra=("--owner-uid", second_uid)))
    assert intruder.wait(120) == ExitCode.RESTORE_REFUSED, intruder.log_tail()
    message = intruder.termination()["message"]
    assert f"is owned by StreamJob tests/job (uid {first_uid})" in message and str(ckpt1) in message, message

    # 5. another job, without the deduplication, restores the savepoint into its own checkpoint with
    #    allowNonRestoredState: killed half copied, then finished
    upgraded = entrypoint_job("count", events.directory, out, tmp_path / "upgraded.json")
    restore_args = run_args(
        upgraded, ckpt2.as_uri(),
        extra=("--restore-from", savepoint.as_uri(), "--owner-uid", second_uid, "--allow-non-restored-state"),
    )
    restoring = PausePoint("restore:4", "a restore, four files copied")
    pause_then_kill(start(restoring, args=restore_args), restoring)
    assert (ckpt2 / RESTORE_MARKER).exists()
    assert json.loads((ckpt2 / OWNER_FILE).read_text())["uid"] == second_uid

    final = start(args=restore_args)
    assert final.wait(600) == ExitCode.FINISHED, final.log_tail()
    log = final.log_text()
    assert "restored savepoint" in log and "skipped checkpoint recovery" in log, log
    assert "dropped non-restored state" in log and "operatorId=1 operator=dedupe" in log, log
    assert log.count("started query") == 2, "started again once, after dropping the deduplication's state"
    assert sorted(p.name for p in (ckpt2 / "state").iterdir()) == ["0"]
    assert json.loads((ckpt2 / OWNER_FILE).read_text())["uid"] == second_uid and not (ckpt2 / RESTORE_MARKER).exists()
    got = outputs.file_sink_rows(out)
    expected = events.tumbling(events.recorded_plan(ckpt2))
    assert got == expected, f"duplicated or wrong: {sorted((got - expected).items())}\nmissing: {sorted((expected - got).items())}"
