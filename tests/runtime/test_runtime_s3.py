"""Checkpoint and savepoint on S3, end to end: s3a:// checkpoints, an s3:// savepoint, a restore.

Against the test bed's S3 server (versitygw) with the s3a jars from
testbed/build/fetch-jars.sh ($STREAMJOB_JARS_DIR); credentials reach the
runtime only as AWS_* environment variables.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import runtime_outputs as outputs
from pause_points import FILE_CONTEXT_MANAGER, PausePoint, jvm_hook_args

from runtime_harness import S3_BUCKET as BUCKET
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import Input

from job_runtime.savepoints import MANIFEST_NAME
from testbed import locate
from testbed.s3 import S3Server, client


def download(s3: object, prefix: str, target: Path) -> Path:
    paginator = s3.get_paginator("list_objects_v2")  # type: ignore[attr-defined]
    for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            path = target / obj["Key"][len(prefix) + 1 :]
            path.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(BUCKET, obj["Key"], str(path))  # type: ignore[attr-defined]
    return target


def listing(s3: object, prefix: str) -> dict[str, int]:
    paginator = s3.get_paginator("list_objects_v2")  # type: ignore[attr-defined]
    return {
        obj["Key"][len(prefix) + 1 :]: int(obj["Size"])
        for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix + "/")
        for obj in page.get("Contents", [])
    }


def test_s3a_checkpoint_and_s3_savepoint_round_trip(
    events: Input, s3_server: S3Server, processes: list[RuntimeProcess], pause_jar: Path, tmp_path: Path
) -> None:
    creds = s3_server.credentials
    env = runtime_env({
        "AWS_ACCESS_KEY_ID": creds.access_key,
        "AWS_SECRET_ACCESS_KEY": creds.secret_key,
        "AWS_REGION": creds.region,
        "STREAMJOB_JARS_DIR": str(locate.require_jars_dir()),
    })
    run = f"run-{uuid.uuid4().hex[:8]}"
    s3_args = ("--s3-endpoint", creds.endpoint, "--s3-path-style", "--s3-region", creds.region)
    out = tmp_path / "out"
    job = example_job("tumbling", events.directory, out, tmp_path / "job.json")

    # killed while the first offset-log entry is written on s3a: the restart must recover
    s3 = client(creds)
    point = PausePoint(r"write:/ckpt1/offsets/0$", "while the first offset-log entry was written")
    killed = RuntimeProcess(
        tmp_path / "killed",
        run_args(job, f"s3a://{BUCKET}/{run}/ckpt1", trigger="3 seconds", extra=(*s3_args, *jvm_hook_args(pause_jar))),
        env={**env, **point.env(tmp_path / "pause", delegate=FILE_CONTEXT_MANAGER)}, label="killed",
    )
    processes.append(killed.start())
    killed.wait_paused(tmp_path / "pause")
    killed.kill()
    everything = listing(s3, f"{run}/ckpt1")
    (tmp_path / "killed-leftover.json").write_text(json.dumps(everything, indent=1))
    left = {k: v for k, v in everything.items() if k and not k.endswith("/")}  # S3A's directory markers aside
    assert "metadata" in left and not any(p.startswith("commits/") for p in left), left
    assert "offsets/0" not in left, left

    first = RuntimeProcess(
        tmp_path / "first",
        run_args(job, f"s3a://{BUCKET}/{run}/ckpt1", trigger="3 seconds",
                 extra=(*s3_args, "--savepoint-location", f"s3://{BUCKET}/{run}/savepoints")),
        env=env, label="first",
    )
    processes.append(first.start())
    first.wait_for("a committed batch on s3a", lambda s: (s["latestCompletedBatch"] or -1) >= 1, timeout=300)
    savepoint = first.stop_with_savepoint()
    assert savepoint.startswith(f"s3://{BUCKET}/{run}/savepoints/")
    key = savepoint.removeprefix(f"s3://{BUCKET}/")
    assert s3.head_object(Bucket=BUCKET, Key=f"{key}/{MANIFEST_NAME}")["ContentLength"] > 0

    second = RuntimeProcess(
        tmp_path / "second",
        run_args(job, f"s3a://{BUCKET}/{run}/ckpt2", extra=(*s3_args, "--restore-from", savepoint)),
        env=env, label="second",
    )
    processes.append(second.start())
    assert second.wait(400) == 0, second.log_tail()
    for proc in (first, second):  # secrets stay out of the logs
        assert creds.secret_key not in proc.log_text()

    recorded = download(s3, f"{run}/ckpt2", tmp_path / "ckpt2")
    assert outputs.file_sink_rows(out) == events.tumbling(events.recorded_plan(recorded))
