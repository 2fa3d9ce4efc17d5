"""A running job writes savepoints only below its savepoint location, and deletes nothing it did not write.

One real runtime process (file:// checkpoint and savepoint location), asked over
its control endpoint:
- targets outside the savepoint location (a sibling directory holding files,
  its checkpoint location, a `..` escape, another scheme, the location itself)
  are refused with a 400 that names the path, and every file there survives;
- a target inside the location that holds someone else's files is accepted,
  then fails without touching them; the job keeps running;
- a target the way the operator names them (<location>/<job>-<time>-<trigger>)
  completes, and idle connections without a token do not stop the endpoint from
  answering meanwhile.
"""

from __future__ import annotations

import socket
from pathlib import Path

from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import Input
from test_runtime_savepoints import SLOW_TRIGGER, wait_savepoint

from job_runtime.savepoints import IN_PROGRESS_MARKER, MANIFEST_NAME
from streamjob_contract.runtime_status import RunState


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_savepoint_requests_are_confined_and_delete_nothing_foreign(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    location, checkpoint, elsewhere = tmp_path / "savepoints", tmp_path / "ckpt", tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / "part-0.parquet").write_bytes(b"PAR1 someone else's data")
    (elsewhere / "notes.txt").write_text("keep me")
    foreign = location / "team-b-export"
    (foreign / "2024").mkdir(parents=True)
    (foreign / "2024" / "rows.csv").write_text("a,b\n1,2\n")

    job = example_job("session", events.directory, tmp_path / "out", tmp_path / "job.json")
    proc = RuntimeProcess(
        tmp_path / "run",
        run_args(job, checkpoint.as_uri(), trigger=SLOW_TRIGGER, extra=("--savepoint-location", location.as_uri())),
        label="job",
    )
    processes.append(proc.start())
    proc.wait_for("a committed batch", lambda s: (s["latestCompletedBatch"] or -1) >= 1)
    before = {root: files_under(root) for root in (elsewhere, checkpoint, location)}

    refused = {
        elsewhere.as_uri(): "outside the job's savepoint location",
        (elsewhere / "sp").as_uri(): "outside the job's savepoint location",
        f"{location.as_uri()}/../elsewhere": "'..' path segments are not allowed",
        checkpoint.as_uri(): "outside the job's savepoint location",
        location.as_uri(): "outside the job's savepoint location",
        "s3://savepoints/job/sp": "outside the job's savepoint location",
        "hdfs://nn/sp": "unsupported scheme",
    }
    for path, why in refused.items():
        code, body = proc.request("POST", "/savepoints", {"path": path, "stop": False})
        assert code == 400, (path, code, body)
        assert path in body["error"] and why in body["error"], (path, body)
    assert proc.request("GET", "/savepoints")[1]["savepoints"] == [], "a refused request was recorded"

    # inside the location, but not empty and not ours: accepted, refused by the writer, nothing deleted
    code, accepted = proc.request("POST", "/savepoints", {"path": foreign.as_uri(), "stop": False})
    assert code == 202, accepted
    failed = wait_savepoint(proc, str(accepted["id"]))
    assert failed["state"] == "FAILED", failed
    assert "holds files that are not a savepoint in progress of ours (first: 2024/rows.csv)" in str(failed["error"]), failed
    assert proc.status()["state"] == RunState.RUNNING
    assert files_under(elsewhere) == before[elsewhere]
    assert files_under(foreign) == {"2024/rows.csv": b"a,b\n1,2\n"}
    # the committed log entries (an entry being written at the snapshot, `.N.<uuid>.tmp`, is renamed since)
    committed = {p: b for p, b in before[checkpoint].items()
                 if p.startswith(("commits/", "offsets/", "metadata")) and not p.endswith((".tmp", ".tmp.crc"))}
    assert {p: b for p, b in files_under(checkpoint).items() if p in committed} == committed

    # the operator's way of naming targets still works; idle unauthenticated connections do not block it
    host, port = proc.address().rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
    try:
        target = location / "job-20260101T000000Z-manual"
        code, accepted = proc.request("POST", "/savepoints", {"path": target.as_uri(), "stop": False})
        assert code == 202, accepted
        done = wait_savepoint(proc, str(accepted["id"]))
        assert done["state"] == "COMPLETED", done
        assert (target / MANIFEST_NAME).exists() and not (target / IN_PROGRESS_MARKER).exists()
        # the same target again: a completed savepoint is never overwritten
        code, accepted = proc.request("POST", "/savepoints", {"path": target.as_uri(), "stop": False})
        assert code == 202, accepted
        again = wait_savepoint(proc, str(accepted["id"]))
        assert again["state"] == "FAILED" and "holds a completed savepoint" in str(again["error"]), again
    finally:
        for s in idle:
            s.close()
