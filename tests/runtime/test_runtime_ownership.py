"""Checkpoint ownership (job_runtime.checkpoints.ownership) on local disk and on the test bed's S3 server.

Two real runtime processes on one checkpoint are in test_runtime_kill_points.py
(the second, another StreamJob, exits 13 naming the owner). Here: the marker's
rules on both stores, two jobs claiming one empty location at the same instant
(exactly one wins), and savepoints that never carry an owner while a restore
keeps the target's own.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from runtime_harness import S3_BUCKET as BUCKET

from job_runtime import savepoints as sp
from job_runtime.checkpoints.ownership import OWNER_FILE, CheckpointOwnedError, claim_checkpoint
from streamjob_contract.s3 import S3Config, Store, parse_location
from testbed.s3 import S3Server


@pytest.fixture(params=["file", "s3"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, S3Config | None]:
    if request.param == "file":
        return (tmp_path / "ckpt").as_uri(), None
    server: S3Server = request.getfixturevalue("s3_server")
    c = server.credentials
    config = S3Config(endpoint_url=c.endpoint, region=c.region, access_key_id=c.access_key, secret_access_key=c.secret_key)
    return f"s3a://{BUCKET}/owner-{uuid.uuid4().hex[:8]}/ckpt", config


def read_marker(uri: str, config: S3Config | None) -> dict[str, str]:
    loc = parse_location(uri)
    store = Store(loc, config.client() if config else None)
    return json.loads(store.read_bytes(OWNER_FILE))


def test_first_claim_writes_the_marker_the_same_uid_passes_another_is_refused(location: tuple[str, S3Config | None]) -> None:
    uri, config = location
    first = claim_checkpoint(uri, namespace="team-a", name="orders", uid="uid-1", s3=config)
    assert (first.job, first.uid) == ("team-a/orders", "uid-1")
    marker = read_marker(uri, config)
    assert {k: marker[k] for k in ("namespace", "name", "uid")} == {"namespace": "team-a", "name": "orders", "uid": "uid-1"}
    assert marker["createdAt"].endswith("Z")

    again = claim_checkpoint(uri, namespace="team-a", name="orders", uid="uid-1", s3=config)
    assert again.created_at == first.created_at, "the marker is not rewritten"

    # the same name with another uid is another job (deleted and created again): refused too
    for namespace, name in (("team-b", "payments"), ("team-a", "orders")):
        with pytest.raises(CheckpointOwnedError) as refused:
            claim_checkpoint(uri, namespace=namespace, name=name, uid="uid-2", s3=config)
        assert str(refused.value) == (
            f"checkpoint {uri} is owned by StreamJob team-a/orders (uid uid-1); two jobs must never share a checkpoint: "
            "give this job its own spec.checkpoint.location"
        )
    assert read_marker(uri, config)["uid"] == "uid-1"


def test_two_jobs_claiming_an_empty_location_at_once_one_wins(location: tuple[str, S3Config | None]) -> None:
    uri, config = location
    results: dict[str, str] = {}
    barrier = threading.Barrier(6)

    def claim(uid: str) -> None:
        barrier.wait()
        try:
            claim_checkpoint(uri, namespace="ns", name=uid, uid=uid, s3=config)
            results[uid] = "claimed"
        except CheckpointOwnedError:
            results[uid] = "refused"

    threads = [threading.Thread(target=claim, args=(f"uid-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [uid for uid, result in results.items() if result == "claimed"]
    assert len(results) == 6 and len(winners) == 1, results
    assert read_marker(uri, config)["uid"] == winners[0]


def test_an_unreadable_marker_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / OWNER_FILE).write_text("{not json")
    with pytest.raises(CheckpointOwnedError, match=f"{OWNER_FILE} is unreadable"):
        claim_checkpoint((tmp_path / "ckpt").as_uri(), namespace="ns", name="n", uid="u")


def small_checkpoint(root: Path) -> None:
    """Metadata, one committed batch and a state file: enough for the savepoint library."""
    files = {
        "metadata": '{"id":"q"}',
        "offsets/0": 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"2"}}\n{"logOffset":0}',
        "commits/0": 'v1\n{"nextBatchWatermarkMs":0}',
        "sources/0/0": 'v1\n{"path":"file:///in/a.json","timestamp":1,"batchId":0}',
        "state/0/0/1.changelog": "x",
        "_streamjob_recovered/20260101T000000Z/offsets/1": "",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def test_savepoints_never_carry_the_owner_and_a_restore_keeps_the_targets_own(tmp_path: Path) -> None:
    source, savepoint, target = tmp_path / "ckpt", tmp_path / "sp", tmp_path / "restored"
    small_checkpoint(source)
    claim_checkpoint(source.as_uri(), namespace="team-a", name="old", uid="uid-old")
    manifest = sp.write_savepoint(
        source.as_uri(), savepoint.as_uri(), job_name="old", job_namespace="team-a", job_hash="", spark_version="4.3.0"
    )
    assert not any(f.path.startswith("_streamjob") for f in manifest.files)
    assert not (savepoint / OWNER_FILE).exists() and not (savepoint / "_streamjob_recovered").exists()

    # another job claims its fresh checkpoint first (the runtime does), then restores into it
    claim_checkpoint(target.as_uri(), namespace="team-b", name="new", uid="uid-new")
    sp.restore_savepoint(savepoint.as_uri(), target.as_uri(), expected_state_partitions=2)
    assert json.loads((target / OWNER_FILE).read_text())["uid"] == "uid-new"
    assert (target / "commits" / "0").exists() and not (target / sp.RESTORE_MARKER).exists()
