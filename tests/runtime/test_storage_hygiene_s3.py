"""Storage hygiene passes against the real S3 server (versitygw), without Spark: what goes, what stays.

One job's checkpoint prefix with every kind of sibling directory (older ones of
its own, in each state a killed prune can leave behind; another job's; one
with no marker; a newer one; not a run directory at all), its neighbours
outside the prefix, and a savepoint location with complete, abandoned, fresh,
foreign and half-deleted directories. One pass must delete exactly the ones the
rules allow and leave every other object byte for byte; a second pass finds
nothing more. A runtime started on a half-pruned directory refuses (exit 13)
before Spark starts.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from runtime_harness import S3_BUCKET as BUCKET
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env

from job_runtime.checkpoints import hygiene
from streamjob_contract.exitcodes import ExitCode
from job_runtime.checkpoints.janitor import Janitor
from job_runtime.checkpoints.ownership import OWNER_FILE, Owner
from streamjob_contract.s3 import S3Config
from job_runtime.savepoints import DELETING_MARKER, IN_PROGRESS_MARKER, MANIFEST_NAME, build_manifest
from job_runtime.settings import RuntimeSettings
from testbed.s3 import S3Server, client

UID = "3f0c2a9e-1111-2222-3333-444455556666"
OTHER_UID = "9d1e7b2c-aaaa-bbbb-cccc-ddddeeeeffff"
NAME, NAMESPACE = "orders", "team-a"
JOB = f"{NAMESPACE}/{NAME}"
TIMEOUT = 1.5  # seconds; the pass's clock is pinned (below), so ages are exact


def owner_marker(uid: str) -> bytes:
    return Owner(NAMESPACE, NAME, uid, "2026-01-01T00:00:00Z").to_json()


def in_progress_marker(job: str, started: datetime) -> bytes:
    return json.dumps({"job": job, "started_at": started.isoformat()}).encode()


def checkpoint_files(prefix: str, uid: str | None) -> dict[str, bytes]:
    files = {f"{prefix}/metadata": b'{"id":"q"}', f"{prefix}/offsets/0": b"v1\n{}", f"{prefix}/commits/0": b"v1\n{}",
             f"{prefix}/state/0/0/1.delta": b"x" * 100, f"{prefix}/sources/0/0": b"v1\n"}
    if uid is not None:
        files[f"{prefix}/{OWNER_FILE}"] = owner_marker(uid)
    return files


def put(s3: Any, objects: dict[str, bytes]) -> None:
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def keys(s3: Any, prefix: str) -> dict[str, tuple[int, str]]:
    """Every key below ``prefix`` with its size and ETag (S3A directory markers too)."""
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {o["Key"]: (int(o["Size"]), o["ETag"]) for p in pages for o in p.get("Contents", [])}


def newest(s3: Any, prefix: str) -> datetime:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return max(o["LastModified"] for p in pages for o in p.get("Contents", []))


def test_one_pass_prunes_exactly_what_the_rules_allow(s3_server: S3Server, tmp_path: Path) -> None:
    creds = s3_server.credentials
    s3 = client(creds)
    root = f"t-{uuid.uuid4().hex[:8]}"
    base = f"{root}/ck"
    own = f"{base}/{NAME}-{UID[:8]}"
    sp = f"{root}/sp"
    current = f"{own}/run-6"

    # --- the job's own prefix ----------------------------------------------------------------
    put(s3, checkpoint_files(current, UID))
    put(s3, checkpoint_files(f"{own}/run-1", UID))  # superseded, whole, with S3A's directory markers
    put(s3, {f"{own}/run-1/": b"", f"{own}/run-1/offsets/": b"", f"{own}/run-1/state/0/": b""})
    marker = hygiene.pruning_marker(job=JOB, uid=UID, superseded_by=f"s3a://{BUCKET}/{current}", now=datetime.now(timezone.utc))
    # the states a prune killed at any instant leaves: marker written; some content gone; only the marker left
    put(s3, {**checkpoint_files(f"{own}/run-2", UID), f"{own}/run-2/{hygiene.PRUNING_MARKER}": marker})
    put(s3, {f"{own}/run-3/{OWNER_FILE}": owner_marker(UID), f"{own}/run-3/state/0/0/2.delta": b"y",
             f"{own}/run-3/{hygiene.PRUNING_MARKER}": marker})
    put(s3, {f"{own}/run-4/{hygiene.PRUNING_MARKER}": marker})
    kept_own = {
        **checkpoint_files(f"{own}/run-0", None),  # no owner marker: not provably ours
        **checkpoint_files(f"{own}/run-5", OTHER_UID),  # another uid's (cannot happen by the layout; kept all the same)
        **checkpoint_files(f"{own}/run-7", UID),  # newer than the current one
        f"{own}/notes/readme.txt": b"not a run directory",
    }
    put(s3, kept_own)
    # --- neighbours outside the prefix --------------------------------------------------------
    put(s3, {**checkpoint_files(f"{base}/{NAME}-{OTHER_UID[:8]}/run-1", OTHER_UID),  # a job of the same name, recreated
             **checkpoint_files(f"{base}/{NAME}-{UID[:8]}x/run-1", UID),  # a prefix that merely starts the same
             **checkpoint_files(f"{base}/billing-{UID[:8]}/run-1", UID),
             f"{root}/ck-other/{NAME}-{UID[:8]}/run-1/{OWNER_FILE}": owner_marker(UID)})

    # --- the savepoint location ---------------------------------------------------------------
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    manifest = build_manifest(
        job_name=NAME, job_namespace=NAMESPACE, job_hash="h", spark_version="4", state_partitions=2,
        state_store_provider=None, batch_id=0, watermark_ms=None, created_at=long_ago, source_checkpoint="s3a://x",
        files=[("metadata", 10, "2" * 64), ("commits/0", 5, "0" * 64), ("offsets/0", 5, "1" * 64)],
    ).to_json()
    put(s3, {
        f"{sp}/complete/{MANIFEST_NAME}": manifest, f"{sp}/complete/commits/0": b"v1\n{}", f"{sp}/complete/offsets/0": b"v1\n{}",
        # killed between writing the manifest and removing the marker: complete all the same
        f"{sp}/complete-marked/{MANIFEST_NAME}": manifest, f"{sp}/complete-marked/{IN_PROGRESS_MARKER}": in_progress_marker(JOB, long_ago),
        f"{sp}/abandoned/{IN_PROGRESS_MARKER}": in_progress_marker(JOB, long_ago), f"{sp}/abandoned/state/0/0/1.delta": b"z" * 50,
        f"{sp}/other-job/{IN_PROGRESS_MARKER}": in_progress_marker("team-a/billing", long_ago), f"{sp}/other-job/offsets/0": b"o",
        f"{sp}/foreign/data.csv": b"a,b\n",
        # a retention delete cut short: the deleting marker (a manifest copy) and one listed file left
        f"{sp}/half-deleted/{DELETING_MARKER}": manifest, f"{sp}/half-deleted/offsets/0": b"v1\n{}",
    })
    old_written = newest(s3, f"{sp}/")
    deadline = time.monotonic() + 30
    while datetime.now(timezone.utc) < old_written + timedelta(seconds=3):  # S3 times have whole seconds
        assert time.monotonic() < deadline, "the clock did not move"
        time.sleep(0.2)
    put(s3, {f"{sp}/fresh/{IN_PROGRESS_MARKER}": in_progress_marker(JOB, datetime.now(timezone.utc)),
             f"{sp}/fresh/commits/0": b"v1\n{}"})
    pinned_now = newest(s3, f"{sp}/fresh/") + timedelta(seconds=0.5)
    kept_sp = {k: v for k, v in keys(s3, f"{sp}/").items() if "/abandoned/" not in k and "/half-deleted/" not in k}

    # a runtime started on a half-pruned directory refuses before any JVM starts
    refused = RuntimeProcess(
        tmp_path / "refused",
        run_args(example_job("tumbling", tmp_path / "in", tmp_path / "out", tmp_path / "job.json"), f"s3a://{BUCKET}/{own}/run-2", name=NAME,
                 extra=("--owner-uid", UID, "--s3-endpoint", creds.endpoint, "--s3-path-style", "--s3-region", creds.region)),
        env=runtime_env({"AWS_ACCESS_KEY_ID": creds.access_key, "AWS_SECRET_ACCESS_KEY": creds.secret_key}),
        label="refused",
    )
    refused.start()
    try:
        assert refused.wait(120) == ExitCode.RESTORE_REFUSED, refused.log_tail()
    finally:
        refused.kill()
    assert f"holds {hygiene.PRUNING_MARKER}" in refused.termination()["message"]

    before = keys(s3, f"{root}/")
    settings = RuntimeSettings(
        job_file=Path("unused"), name=NAME, namespace=NAMESPACE, checkpoint_location=f"s3a://{BUCKET}/{current}",
        state_partitions=2, owner_uid=UID, savepoint_location=f"s3://{BUCKET}/{sp}", savepoint_timeout_seconds=TIMEOUT,
    )
    config = S3Config(endpoint_url=creds.endpoint, region=creds.region, path_style=True,
                      access_key_id=creds.access_key, secret_access_key=creds.secret_key)
    janitor = Janitor(settings, config, latest_completed=lambda: 1, writing=lambda: [], now=lambda: pinned_now)
    janitor.run_pass(committed=1)

    report = janitor.report()
    assert (report["prunedRunDirs"], report["prunedSavepointDirs"], report["lastError"]) == (4, 2, None), report
    after = keys(s3, f"{root}/")
    gone = sorted({k.removeprefix(f"{own}/").removeprefix(f"{sp}/").split("/")[0] for k in set(before) - set(after)})
    assert gone == ["abandoned", "half-deleted", "run-1", "run-2", "run-3", "run-4"], gone
    assert not [k for k in after if any(k.startswith(f"{own}/run-{n}/") for n in (1, 2, 3, 4))]
    assert not [k for k in after if k.startswith((f"{sp}/abandoned/", f"{sp}/half-deleted/"))]
    # everything else is there, byte for byte: the current run, the kept siblings, the neighbours, the savepoints
    survivors = {k: v for k, v in before.items() if k in after}
    assert survivors == {k: after[k] for k in survivors}
    assert set(after) == set(survivors)
    for key in [*checkpoint_files(current, UID), *kept_own, *kept_sp]:
        assert key in after, key

    janitor.run_pass(committed=1)  # nothing more to do, nothing else touched
    assert keys(s3, f"{root}/") == after
    assert janitor.report()["prunedRunDirs"] == 4 and janitor.report()["passes"] == 2
