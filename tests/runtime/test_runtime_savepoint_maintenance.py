"""A savepoint taken while the job runs survives Spark's state maintenance deleting old versions under it.

Spark's state maintenance deletes the state versions no retained version needs (those below the
newest snapshot it keeps) while the query runs; a savepoint of a running query that listed every
retained version and then copied them for long failed on the first listed file that was gone, at
every attempt, for large state. Here the deletion is made deterministic: the savepoint is paused
right after it listed the checkpoint (job_runtime.testhooks, "savepoint-planned"), the test deletes
what maintenance may delete by then (per state store, every changelog and snapshot below its newest
snapshot at or below the last committed batch's version), and lets the savepoint go on. It must
complete, and a job restored from it must go on exactly: the first job's output up to the
savepoint's batch plus the restored job's output equals the reference.

The session job (examples/jobs/session.yaml) on the RocksDB state store with changelog
checkpointing, a batch every 3 s; a snapshot every 2 versions (minDeltasForSnapshot) uploaded by maintenance every 5 s
(runtime_harness.TEST_CONF), so the checkpoint holds snapshots mid-stream.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import runtime_outputs as outputs
from pause_points import PausePoint, pause_env
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import FILES, Input
from test_runtime_savepoints import wait_savepoint

PLANNED = PausePoint("savepoint-planned:1", "the savepoint listed its files, copied none")
SNAPSHOT_EVERY_2 = ("--conf", "spark.sql.streaming.stateStore.minDeltasForSnapshot=2")
VERSIONED = re.compile(r"^(\d+)\.(changelog|zip)$")


def state_versions(checkpoint: Path) -> dict[Path, dict[int, list[Path]]]:
    """State store directory -> version -> its changelog and zip files."""
    found: dict[Path, dict[int, list[Path]]] = {}
    for f in checkpoint.glob("state/*/*/*"):
        match = VERSIONED.match(f.name)
        if match and f.parent.name.isdigit():
            found.setdefault(f.parent, {}).setdefault(int(match.group(1)), []).append(f)
    return found


def snapshot_at_or_below(versions: dict[int, list[Path]], highest: int) -> int:
    return max((v for v, files in versions.items() if v <= highest and any(f.suffix == ".zip" for f in files)), default=0)


def delete_as_maintenance_would(checkpoint: Path, committed: int) -> list[Path]:
    """Deletes, per store, the versions below its newest snapshot at or below ``committed + 1`` (the
    version of the last committed batch): no retained version needs them."""
    deleted = []
    for versions in state_versions(checkpoint).values():
        base = snapshot_at_or_below(versions, committed + 1)
        for version, files in versions.items():
            if version < base:
                for f in files:
                    f.unlink()
                    f.with_name(f".{f.name}.crc").unlink(missing_ok=True)  # Hadoop's local checksum goes with it
                    deleted.append(f)
    return deleted


def test_maintenance_deleting_old_versions_mid_savepoint_then_exact_restore(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    out1, out2, ckpt1, pauses = tmp_path / "out1", tmp_path / "out2", tmp_path / "ckpt1", tmp_path / "pauses"
    first = RuntimeProcess(
        tmp_path / "first",
        run_args(example_job("session", events.directory, out1, tmp_path / "job1.json"), ckpt1.as_uri(),
                 trigger="3 seconds", extra=("--savepoint-location", tmp_path.as_uri(), *SNAPSHOT_EVERY_2)),
        env=runtime_env(pause_env([PLANNED], pauses)),
        label="first",
    )
    processes.append(first.start())

    # wait for a snapshot above version 1 at or below the committed batch's version: there is something to delete
    deadline = time.monotonic() + 240
    while True:
        status = first.wait_for("a committed batch", lambda s: (s["latestCompletedBatch"] or -1) >= 1)
        committed = int(status["latestCompletedBatch"])
        if any(snapshot_at_or_below(v, committed + 1) >= 2 for v in state_versions(ckpt1).values()):
            break
        assert time.monotonic() < deadline, f"no state snapshot uploaded in time\n{first.log_tail()}"
        time.sleep(0.5)

    savepoint = tmp_path / "running-savepoint"
    code, accepted = first.request("POST", "/savepoints", {"path": savepoint.as_uri(), "stop": False})
    assert code == 202, accepted
    first.wait_paused(pauses)
    # the savepoint's batch is at least `committed`: what is deleted here no restore of it loads
    deleted = delete_as_maintenance_would(ckpt1, committed)
    assert deleted, "nothing to delete: the test would not test anything"
    (pauses / "resume-0").write_text("")

    done = wait_savepoint(first, str(accepted["id"]))
    assert done["state"] == "COMPLETED", (done, [str(p.relative_to(ckpt1)) for p in deleted])
    batch = int(done["batchId"])  # type: ignore[arg-type]
    assert batch < FILES - 1, f"savepoint at batch {batch}: not in the middle of the stream"
    first.terminate()
    first.wait(120)

    job2 = example_job("session", events.directory, out2, tmp_path / "job2.json")
    second = RuntimeProcess(
        tmp_path / "second",
        run_args(job2, (tmp_path / "ckpt2").as_uri(), extra=("--restore-from", savepoint.as_uri(), *SNAPSHOT_EVERY_2)),
        label="second",
    )
    processes.append(second.start())
    assert second.wait(400) == 0, second.log_tail()
    assert "restored savepoint" in second.log_text()
    combined = outputs.foreach_batch_rows(out1, range(0, batch + 1)) + outputs.foreach_batch_rows(out2)
    assert min(outputs.batch_dirs(out2)) == batch + 1
    assert combined == events.sessions(events.recorded_plan(tmp_path / "ckpt2"))
