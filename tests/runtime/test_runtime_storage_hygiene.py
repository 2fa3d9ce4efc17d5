"""Storage hygiene in a real driver on S3: a savepoint restore into a new run directory, then the old one goes.

The operator's layout, driven by hand: a first driver on ``<ck>/<name>-<uid8>/run-1``
stops with a savepoint; a second restores it into ``run-2`` (a new epoch, as an
upgrade or a savepointRedeployNonce would). Once the second driver has committed
a batch of its own, run-1 is gone, and so is an abandoned savepoint directory of
this job older than the savepoint timeout; run-2, the complete savepoint and a
neighbouring job's checkpoint, byte for byte, are still there. The second driver
is then SIGKILLed, a third resumes run-2, and the sink holds every row exactly once.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import runtime_outputs as outputs
from test_runtime_s3 import download

from runtime_harness import S3_BUCKET as BUCKET
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import Input

from job_runtime.checkpoints.ownership import OWNER_FILE
from job_runtime.savepoints import IN_PROGRESS_MARKER, MANIFEST_NAME
from testbed import locate
from testbed.s3 import S3Server, client

UID = "5b7e0c1d-2222-4333-8444-555566667777"
NEIGHBOUR_UID = "0aa1b2c3-9999-4888-8777-666655554444"
NAME = "hygiene"
TIMEOUT_SECONDS = 20


def objects(s3: object, prefix: str) -> dict[str, tuple[int, str]]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)  # type: ignore[attr-defined]
    return {o["Key"]: (int(o["Size"]), o["ETag"]) for p in pages for o in p.get("Contents", [])}


def test_old_run_directory_goes_after_a_restore_and_its_first_batch(
    events: Input, s3_server: S3Server, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    creds = s3_server.credentials
    s3 = client(creds)
    env = runtime_env({
        "AWS_ACCESS_KEY_ID": creds.access_key, "AWS_SECRET_ACCESS_KEY": creds.secret_key, "AWS_REGION": creds.region,
        "STREAMJOB_JARS_DIR": str(locate.require_jars_dir()),
    })
    root = f"hyg-{uuid.uuid4().hex[:8]}"
    own = f"{root}/ck/{NAME}-{UID[:8]}"
    savepoints = f"{root}/sp"
    common = ("--s3-endpoint", creds.endpoint, "--s3-path-style", "--s3-region", creds.region,
              "--owner-uid", UID, "--savepoint-location", f"s3://{BUCKET}/{savepoints}")
    out = tmp_path / "out"
    job = example_job("tumbling", events.directory, out, tmp_path / "job.json")

    # a neighbouring job's checkpoint next to ours, and an abandoned savepoint of this job's
    neighbour = f"{root}/ck/{NAME}-{NEIGHBOUR_UID[:8]}/run-1"
    for key, body in {f"{neighbour}/{OWNER_FILE}": json.dumps({"namespace": "tests", "name": NAME, "uid": NEIGHBOUR_UID}),
                      f"{neighbour}/commits/0": "v1\n{}", f"{neighbour}/offsets/0": "v1\n{}"}.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body.encode())
    started = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat()
    s3.put_object(Bucket=BUCKET, Key=f"{savepoints}/abandoned/{IN_PROGRESS_MARKER}",
                  Body=json.dumps({"job": f"tests/{NAME}", "started_at": started}).encode())
    s3.put_object(Bucket=BUCKET, Key=f"{savepoints}/abandoned/state/0/0/1.delta", Body=b"x" * 64)
    abandoned_at = time.monotonic()
    neighbour_before = objects(s3, f"{root}/ck/{NAME}-{NEIGHBOUR_UID[:8]}/")

    first = RuntimeProcess(tmp_path / "first", run_args(job, f"s3a://{BUCKET}/{own}/run-1", name=NAME, trigger="1 second",
                                                        extra=common), env=env, label="first")
    processes.append(first.start())
    first.wait_for("a committed batch", lambda s: (s["latestCompletedBatch"] or -1) >= 1, timeout=300)
    savepoint = first.stop_with_savepoint()
    batch = first.termination()["savepoint"]["batchId"]
    run1 = objects(s3, f"{own}/run-1/")
    assert f"{own}/run-1/{OWNER_FILE}" in run1 and f"{own}/run-1/commits/{batch}" in run1

    # the abandoned directory must be older than the timeout when the second driver looks (bounded wait)
    while time.monotonic() < abandoned_at + TIMEOUT_SECONDS + 2:
        time.sleep(0.5)
    restore_args = run_args(
        job, f"s3a://{BUCKET}/{own}/run-2", name=NAME, trigger="1 second",
        extra=(*common, "--savepoint-timeout-seconds", str(TIMEOUT_SECONDS), "--hygiene-interval-seconds", "2",
               "--restore-from", savepoint),
    )
    second = RuntimeProcess(tmp_path / "second", restore_args, env=env, label="second")
    processes.append(second.start())
    status = second.wait_for(
        "the old run directory and the abandoned savepoint pruned",
        lambda s: bool(s["storage"]) and s["storage"]["prunedRunDirs"] >= 1 and s["storage"]["prunedSavepointDirs"] >= 1,
        timeout=300,
    )
    assert status["storage"]["lastError"] is None, status["storage"]
    assert (status["storage"]["prunedRunDirs"], status["storage"]["prunedSavepointDirs"]) == (1, 1), status["storage"]
    log = second.log_text()
    # it waited for a batch of its own: the one it started from was the savepoint's
    started_at = re.search(r"storage hygiene on job=tests/hygiene committedBatch=(\d+)", log)
    assert started_at and int(started_at.group(1)) > batch, log[-3000:]
    assert re.search(rf"pruned checkpoint run directory job=tests/{NAME} dir=s3a://{BUCKET}/{own}/run-1 files=\d+ reason=", log)
    assert re.search(rf"pruned savepoint directory job=tests/{NAME} dir=s3://{BUCKET}/{savepoints}/abandoned files=2 reason=", log)

    assert objects(s3, f"{own}/run-1") == {}
    run2 = objects(s3, f"{own}/run-2/")
    assert f"{own}/run-2/{OWNER_FILE}" in run2 and any(k.startswith(f"{own}/run-2/commits/") for k in run2)
    assert objects(s3, f"{savepoints}/abandoned") == {}
    assert f"{savepoint.removeprefix(f's3://{BUCKET}/')}/{MANIFEST_NAME}" in objects(s3, f"{savepoints}/")
    assert objects(s3, f"{root}/ck/{NAME}-{NEIGHBOUR_UID[:8]}/") == neighbour_before

    # killed at any instant, the job resumes its own run directory and every row is there exactly once
    second.kill()
    third = RuntimeProcess(tmp_path / "third", [*restore_args[:-2], "--trigger-interval", "available-now", *restore_args[-2:]],
                           env=env, label="third")
    processes.append(third.start())
    assert third.wait(400) == 0, third.log_tail()
    assert "skipped restore" in third.log_text()
    recorded = download(s3, f"{own}/run-2", tmp_path / "run-2")
    assert outputs.file_sink_rows(out) == events.tumbling(events.recorded_plan(recorded))
    for proc in (first, second, third):
        assert creds.secret_key not in proc.log_text()
