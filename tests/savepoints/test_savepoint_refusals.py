"""Corrupt, incomplete or mismatched savepoints and unsafe restore targets are refused, saying what and where;
savepoints can be listed, inspected and deleted."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamjob_contract import checkpoint as ckpt
from job_runtime import savepoints as sp
from streamjob_contract.s3 import S3Config, parse_location
from savepoint_helpers import STATE_PARTITIONS, RealCheckpoint

JOB = {"job_name": "counts", "job_namespace": "team-a", "job_hash": "abc123", "spark_version": "4.3.0"}


@pytest.fixture
def savepoint(real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_prefix: str) -> sp.Manifest:
    return sp.write_savepoint(real_checkpoint.uri, s3_prefix, s3_config=s3_config, **JOB)


def _key(uri: str, relative: str) -> tuple[str, str]:
    loc = parse_location(uri).child(relative)
    return loc.bucket, loc.path


def _a_state_file(manifest: sp.Manifest) -> sp.ManifestFile:
    # a changelog, or the snapshot zip a restore starts from (a savepoint holds no older changelog then)
    return next(f for f in manifest.files if f.path.startswith("state/") and f.path.endswith((".changelog", ".zip")))


def _restore_refused(uri: str, s3_config: S3Config, tmp_path: Path, error: type[Exception]) -> str:
    with pytest.raises(error) as info:
        sp.restore_savepoint(uri, f"file://{tmp_path / 'target'}", expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    return str(info.value)


def test_missing_manifest_is_not_a_savepoint(
    savepoint: sp.Manifest, s3_config: S3Config, s3_client: Any, s3_prefix: str, tmp_path: Path
) -> None:
    s3_client.delete_object(Bucket=_key(s3_prefix, "_savepoint.json")[0], Key=_key(s3_prefix, "_savepoint.json")[1])

    with pytest.raises(sp.SavepointNotFoundError) as info:
        sp.validate_savepoint(s3_prefix, s3_config=s3_config)
    assert str(info.value) == f"{s3_prefix}: no _savepoint.json: not a completed savepoint"
    assert "no _savepoint.json" in _restore_refused(s3_prefix, s3_config, tmp_path, sp.SavepointNotFoundError)
    assert sp.list_savepoints(s3_prefix, s3_config=s3_config) == []
    assert not (tmp_path / "target").exists()


def test_missing_file_is_named(
    savepoint: sp.Manifest, s3_config: S3Config, s3_client: Any, s3_prefix: str, tmp_path: Path
) -> None:
    victim = _a_state_file(savepoint)
    s3_client.delete_object(Bucket=_key(s3_prefix, victim.path)[0], Key=_key(s3_prefix, victim.path)[1])

    with pytest.raises(sp.SavepointFileMissingError) as info:
        sp.validate_savepoint(s3_prefix, s3_config=s3_config)
    assert str(info.value).startswith(f"{s3_prefix}: file {victim.path}: missing")
    assert victim.path in _restore_refused(s3_prefix, s3_config, tmp_path, sp.SavepointFileMissingError)


def test_wrong_size_is_named(
    savepoint: sp.Manifest, s3_config: S3Config, s3_client: Any, s3_prefix: str
) -> None:
    victim = _a_state_file(savepoint)
    bucket, key = _key(s3_prefix, victim.path)
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"x" * (victim.size + 3))

    with pytest.raises(sp.SavepointFileSizeError) as info:
        sp.validate_savepoint(s3_prefix, s3_config=s3_config)
    assert str(info.value) == (
        f"{s3_prefix}: file {victim.path}: size mismatch (manifest {victim.size} bytes, found {victim.size + 3})"
    )


@pytest.mark.parametrize("store_checksum", [False, True], ids=["streamed-hash", "stored-sha256"])
def test_wrong_checksum_is_named(
    savepoint: sp.Manifest, s3_config: S3Config, s3_client: Any, s3_prefix: str, tmp_path: Path, store_checksum: bool
) -> None:
    victim = _a_state_file(savepoint)
    bucket, key = _key(s3_prefix, victim.path)
    original = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    corrupted = bytes([original[0] ^ 0xFF]) + original[1:]  # same size, one flipped byte
    extra = {"ChecksumSHA256": base64.b64encode(hashlib.sha256(corrupted).digest()).decode()} if store_checksum else {}
    s3_client.put_object(Bucket=bucket, Key=key, Body=corrupted, **extra)
    found = hashlib.sha256(corrupted).hexdigest()

    with pytest.raises(sp.SavepointChecksumError) as info:
        sp.validate_savepoint(s3_prefix, s3_config=s3_config)
    assert str(info.value) == (
        f"{s3_prefix}: file {victim.path}: checksum mismatch (manifest sha256 {victim.sha256[:12]}…, found {found[:12]}…)"
    )
    assert victim.path in _restore_refused(s3_prefix, s3_config, tmp_path, sp.SavepointChecksumError)
    # Presence and sizes alone still look fine: only the checksum catches this.
    sp.validate_savepoint(s3_prefix, s3_config=s3_config, verify_checksums=False)


def test_partition_mismatch_is_refused(savepoint: sp.Manifest, s3_config: S3Config, s3_prefix: str, tmp_path: Path) -> None:
    with pytest.raises(sp.StatePartitionMismatchError) as info:
        sp.validate_savepoint(s3_prefix, 4, s3_config=s3_config)
    assert str(info.value) == f"{s3_prefix}: state partitions 3 in savepoint, job asks for 4"

    with pytest.raises(sp.StatePartitionMismatchError, match="needs Spark's offline state repartition"):
        sp.restore_savepoint(s3_prefix, f"file://{tmp_path / 't'}", expected_state_partitions=4, s3_config=s3_config)
    assert not (tmp_path / "t").exists()


def test_repartition_of_a_savepoint_with_an_uncommitted_batch_is_refused(
    spark: Any, real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_prefix: str, tmp_path: Path
) -> None:
    cp = real_checkpoint.copy_to(tmp_path / "cp")
    shutil.copy(cp / "offsets" / "3", cp / "offsets" / "4")
    sp.write_savepoint(f"file://{cp}", s3_prefix, s3_config=s3_config, **JOB)

    with pytest.raises(sp.StatePartitionMismatchError, match="batch 4 was planned but never committed"):
        sp.restore_savepoint(s3_prefix, f"file://{tmp_path / 't'}", expected_state_partitions=5, spark=spark, s3_config=s3_config)


def test_target_with_commits_is_never_overwritten(
    savepoint: sp.Manifest, real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_prefix: str, tmp_path: Path
) -> None:
    target = real_checkpoint.copy_to(tmp_path / "busy")  # a checkpoint with progress: commits/0..3
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}

    with pytest.raises(sp.RestoreTargetNotEmptyError) as info:
        sp.restore_savepoint(s3_prefix, f"file://{target}", expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    assert str(info.value).startswith(f"file://{target}: already holds committed batches up to 3")
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before


def test_unfinished_restore_of_the_same_savepoint_is_redone(
    savepoint: sp.Manifest, s3_config: S3Config, s3_prefix: str, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    sp.restore_savepoint(s3_prefix, f"file://{target}", expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    # A restore killed after copying commits but before it finished leaves its marker.
    (target / sp.RESTORE_MARKER).write_text(json.dumps({"savepoint": s3_prefix}))
    state_file = target / _a_state_file(savepoint).path
    state_file.unlink()

    sp.restore_savepoint(s3_prefix, f"file://{target}", expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    assert not (target / sp.RESTORE_MARKER).exists()
    assert state_file.exists()


def test_checkpoint_without_commits_has_nothing_to_savepoint(s3_config: S3Config, s3_prefix: str, tmp_path: Path) -> None:
    (tmp_path / "cp" / "offsets").mkdir(parents=True)
    (tmp_path / "cp" / "offsets" / "0").write_text("v1\n{}\n")
    with pytest.raises(sp.CheckpointSourceError) as info:
        sp.write_savepoint(f"file://{tmp_path / 'cp'}", s3_prefix, s3_config=s3_config, **JOB)
    assert str(info.value) == f"file://{tmp_path / 'cp'}: no committed batch in commits/: nothing to savepoint yet"


def test_list_inspect_delete(real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_client: Any, s3_prefix: str) -> None:
    older = sp.write_savepoint(real_checkpoint.uri, f"{s3_prefix}/sp-a", batch_id=2, s3_config=s3_config, **JOB)
    newer = sp.write_savepoint(real_checkpoint.uri, f"{s3_prefix}/sp-b", s3_config=s3_config, **JOB)
    bucket, key = _key(s3_prefix, "sp-c/metadata")
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"{}")  # an abandoned copy: no manifest

    listed = sp.list_savepoints(s3_prefix, s3_config=s3_config)
    assert [(s.uri, s.batch_id) for s in listed] == [(f"{s3_prefix}/sp-b", 3), (f"{s3_prefix}/sp-a", 2)]
    assert listed[0].total_bytes == newer.total_bytes and listed[0].file_count == len(newer.files)
    assert sp.inspect_savepoint(f"{s3_prefix}/sp-a", s3_config=s3_config) == older

    deleted = sp.delete_savepoint(f"{s3_prefix}/sp-a", s3_config=s3_config)
    assert deleted == len(older.files) + 1
    assert [s.uri for s in sp.list_savepoints(s3_prefix, s3_config=s3_config)] == [f"{s3_prefix}/sp-b"]
    assert s3_client.list_objects_v2(Bucket=bucket, Prefix=_key(s3_prefix, "sp-a")[1] + "/").get("KeyCount") == 0
    sp.validate_savepoint(f"{s3_prefix}/sp-b", s3_config=s3_config)


def _cli(s3_config: S3Config, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_config.endpoint_url or "",
        "AWS_ACCESS_KEY_ID": s3_config.access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": s3_config.secret_access_key or "",
        "AWS_REGION": s3_config.region or "us-east-1",
    }
    return subprocess.run(
        [sys.executable, "-m", "job_runtime.savepoints.cli", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_cli(real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_client: Any, s3_prefix: str, tmp_path: Path) -> None:
    created = _cli(s3_config, "--json", "create", real_checkpoint.uri, f"{s3_prefix}/sp", "--job-name", "counts")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["batch_id"] == 3

    latest = _cli(s3_config, "latest-checkpoint", real_checkpoint.uri)
    assert (latest.returncode, latest.stdout.strip()) == (0, "3")
    listed = _cli(s3_config, "--json", "list", s3_prefix)
    assert [row["uri"] for row in json.loads(listed.stdout)] == [f"{s3_prefix}/sp"]
    inspected = _cli(s3_config, "inspect", f"{s3_prefix}/sp")
    assert "team-a" not in inspected.stdout and "default/counts" in inspected.stdout and "batch:            3" in inspected.stdout
    assert _cli(s3_config, "validate", f"{s3_prefix}/sp", "--partitions", "3").returncode == 0

    refused = _cli(s3_config, "validate", f"{s3_prefix}/sp", "--partitions", "8")
    assert refused.returncode == 3
    assert refused.stderr.strip() == f"refused: {s3_prefix}/sp: state partitions 3 in savepoint, job asks for 8"

    restored = _cli(s3_config, "restore", f"{s3_prefix}/sp", f"file://{tmp_path / 'cp'}", "--partitions", "3")
    assert restored.returncode == 0, restored.stderr
    assert ckpt.latest_completed_batch(f"file://{tmp_path / 'cp'}") == 3
    again = _cli(s3_config, "restore", f"{s3_prefix}/sp", f"file://{tmp_path / 'cp'}", "--partitions", "3")
    assert again.returncode == 3 and "already holds committed batches up to 3" in again.stderr

    assert _cli(s3_config, "delete", "--yes", f"{s3_prefix}/sp").returncode == 0
    gone = _cli(s3_config, "inspect", f"{s3_prefix}/sp")
    assert gone.returncode == 3 and "no _savepoint.json" in gone.stderr
