"""Savepoints of a real RocksDB checkpoint through the real S3 server, restored and resumed by Spark."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


from streamjob_contract import checkpoint as ckpt
from job_runtime import savepoints as sp
from streamjob_contract.s3 import S3Config, parse_location

from savepoint_helpers import (
    BUCKET,
    STATE_PARTITIONS,
    RealCheckpoint,
    expected_counts,
    input_file,
    read_state,
    run_to_end,
    start_query,
    write_input,
)

JOB = {"job_name": "counts", "job_namespace": "team-a", "job_hash": "abc123", "spark_version": "4.3.0"}


def local_digests(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not ckpt.is_hidden(p.relative_to(root).as_posix())
    }


def s3_digests(client: Any, uri: str) -> dict[str, str]:
    loc = parse_location(uri)
    out: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=loc.key_prefix):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=loc.bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"][len(loc.key_prefix):]] = hashlib.sha256(body).hexdigest()
    return out


def resume_with_extra_file(spark: Any, real: RealCheckpoint, checkpoint_uri: str, tmp_path: Path, index: int) -> dict[str, int]:
    """Runs the job once more on ``checkpoint_uri`` over the original input plus one new file.

    The new file lives in its own sibling folder, read together with the original one
    through a glob, so the shared input folder stays as the session fixture left it;
    files the checkpoint's source log already holds are not read again.
    """
    extra = real.input_dir.parent / f"extra-{tmp_path.name}-{index}"
    write_input(extra, index)
    glob = f"{real.input_dir.parent}/{{{real.input_dir.name},{extra.name}}}"
    run_to_end(spark, Path(glob), checkpoint_uri)
    return read_state(spark, checkpoint_uri)


def plus_file(counts: dict[str, int], index: int) -> dict[str, int]:
    total = Counter(counts)
    total.update(row["key"] for row in input_file(index))
    return dict(total)


def test_latest_completed_batch_of_a_real_checkpoint(real_checkpoint: RealCheckpoint) -> None:
    assert ckpt.latest_completed_batch(real_checkpoint.uri) == real_checkpoint.files - 1


def test_uncommitted_offsets_are_not_completed_but_are_saved(
    real_checkpoint: RealCheckpoint, tmp_path: Path, s3_config: S3Config, s3_prefix: str
) -> None:
    cp = real_checkpoint.copy_to(tmp_path / "cp")
    # What a crash between "offsets/4 written" and "commits/4 written" leaves behind.
    shutil.copy(cp / "offsets" / "3", cp / "offsets" / "4")
    shutil.copy(cp / "state" / "0" / "0" / "4.changelog", cp / "state" / "0" / "0" / "6.changelog")
    assert ckpt.latest_completed_batch(f"file://{cp}") == 3

    manifest = sp.write_savepoint(f"file://{cp}", s3_prefix, s3_config=s3_config, **JOB)
    paths = {f.path for f in manifest.files}
    assert manifest.batch_id == 3 and manifest.planned_batch_id == 4
    assert "offsets/4" in paths and "commits/3" in paths
    assert "state/0/0/6.changelog" not in paths  # a state version two batches ahead is not consistent with batch 3
    assert ckpt.latest_completed_batch(s3_prefix, s3=s3_config) == 3


def test_round_trip_file_to_s3_to_file_resumes(
    spark: Any, real_checkpoint: RealCheckpoint, tmp_path: Path, s3_config: S3Config, s3_client: Any, s3_prefix: str
) -> None:
    manifest = sp.write_savepoint(real_checkpoint.uri, s3_prefix, s3_config=s3_config, **JOB)

    assert manifest.batch_id == 3 and manifest.state_partitions == STATE_PARTITIONS
    assert manifest.state_operators == [0] and manifest.planned_batch_id is None
    original = local_digests(real_checkpoint.path)
    stored = s3_digests(s3_client, s3_prefix)
    assert set(stored) == {f.path for f in manifest.files} | {sp.MANIFEST_NAME}
    assert {f.path: f.sha256 for f in manifest.files} == {p: original[p] for p in stored if p != sp.MANIFEST_NAME}
    assert sp.validate_savepoint(s3_prefix, STATE_PARTITIONS, s3_config=s3_config) == manifest

    restored = tmp_path / "restored"
    sp.restore_savepoint(s3_prefix, f"file://{restored}", expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    assert local_digests(restored) == {f.path: f.sha256 for f in manifest.files}
    assert read_state(spark, f"file://{restored}") == expected_counts(4)

    assert resume_with_extra_file(spark, real_checkpoint, f"file://{restored}", tmp_path, 10) == plus_file(expected_counts(4), 10)
    assert ckpt.latest_completed_batch(f"file://{restored}") == 4


def test_restore_to_s3a_is_identical_resumes_and_copies_server_side(
    spark: Any, real_checkpoint: RealCheckpoint, tmp_path: Path, s3_config: S3Config, s3_client: Any, s3_prefix: str
) -> None:
    first = sp.write_savepoint(real_checkpoint.uri, f"{s3_prefix}/sp1", s3_config=s3_config, **JOB)
    target = f"s3a://{BUCKET}/{parse_location(s3_prefix).path}/checkpoint"
    sp.restore_savepoint(f"{s3_prefix}/sp1", target, expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
    assert s3_digests(s3_client, target) == {f.path: f.sha256 for f in first.files}

    # S3 -> S3: a savepoint of the s3a checkpoint is a server-side copy with the same bytes.
    second = sp.write_savepoint(target, f"{s3_prefix}/sp2", s3_config=s3_config, **JOB)
    assert [(f.path, f.size, f.sha256) for f in second.files] == [(f.path, f.size, f.sha256) for f in first.files]
    sp.validate_savepoint(f"{s3_prefix}/sp2", s3_config=s3_config)

    assert read_state(spark, target) == expected_counts(4)
    assert resume_with_extra_file(spark, real_checkpoint, target, tmp_path, 11) == plus_file(expected_counts(4), 11)
    assert ckpt.latest_completed_batch(target, s3=s3_config) == 4


def test_savepoints_of_a_running_query_restore_consistently(
    spark: Any, tmp_path: Path, s3_config: S3Config, s3_prefix: str
) -> None:
    input_dir, cp = tmp_path / "input", f"file://{tmp_path / 'live'}"
    total = 12
    write_input(input_dir, 0)
    query = start_query(spark, input_dir, cp, available_now=False)
    taken: list[sp.Manifest] = []
    errors: list[BaseException] = []

    def feed() -> None:
        try:
            for index in range(1, total):
                time.sleep(0.4)
                write_input(input_dir, index)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        deadline = time.monotonic() + 240
        while (ckpt.latest_completed_batch(cp) or -1) < total - 1 and time.monotonic() < deadline:
            if (ckpt.latest_completed_batch(cp) or -1) >= 1:
                taken.append(sp.write_savepoint(cp, f"{s3_prefix}/sp{len(taken)}", s3_config=s3_config, **JOB))
            time.sleep(0.3)
    finally:
        feeder.join()
        query.stop()
    assert not errors
    assert len({m.batch_id for m in taken}) >= 3, f"savepoints only at batches {[m.batch_id for m in taken]}"

    for i, manifest in enumerate(taken):
        restored = f"file://{tmp_path / f'restored-{i}'}"
        sp.restore_savepoint(f"{s3_prefix}/sp{i}", restored, expected_state_partitions=STATE_PARTITIONS, s3_config=s3_config)
        # Batch b read file b: the state at the savepoint's batch is the count over files 0..b.
        assert read_state(spark, restored) == expected_counts(manifest.batch_id + 1), f"savepoint {i} at batch {manifest.batch_id}"

    last = taken[-1]
    restored = f"file://{tmp_path / f'restored-{len(taken) - 1}'}"
    run_to_end(spark, input_dir, restored)
    assert read_state(spark, restored) == expected_counts(total), f"resumed from batch {last.batch_id}"


def test_restore_with_a_new_partition_count_repartitions_state_offline(
    spark: Any, real_checkpoint: RealCheckpoint, tmp_path: Path, s3_config: S3Config, s3_prefix: str
) -> None:
    sp.write_savepoint(real_checkpoint.uri, s3_prefix, s3_config=s3_config, **JOB)
    restored = f"file://{tmp_path / 'restored'}"
    sp.restore_savepoint(s3_prefix, restored, expected_state_partitions=5, spark=spark, s3_config=s3_config)

    latest = ckpt.latest_completed_batch(restored)
    assert latest is not None and ckpt.read_offset_log(restored, latest).state_partitions == 5
    state = spark.read.format("statestore").load(restored)
    assert {r[0] for r in state.select("partition_id").distinct().collect()} <= set(range(5))
    assert read_state(spark, restored) == expected_counts(4)
    assert resume_with_extra_file(spark, real_checkpoint, restored, tmp_path, 12) == plus_file(expected_counts(4), 12)
