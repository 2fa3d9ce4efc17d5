"""Truth tables for the pure parts: which checkpoint files a savepoint takes, URIs, the manifest."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from streamjob_contract import checkpoint as ckpt
from job_runtime import savepoints as sp
from streamjob_contract.s3 import LocationError, StoredFile, parse_location


@pytest.mark.parametrize(
    ("path", "included"),
    [
        pytest.param("metadata", True, id="query-metadata"),
        pytest.param("offsets/5", True, id="offsets-of-committed-batch"),
        pytest.param("offsets/6", True, id="offsets-of-planned-batch"),
        pytest.param("offsets/7", False, id="offsets-two-ahead"),
        pytest.param("commits/5", True, id="commit-of-batch"),
        pytest.param("commits/6", False, id="commit-after-batch"),
        pytest.param("commits/.5.crc", False, id="hadoop-crc"),
        pytest.param("offsets/.6.b7e1.tmp", False, id="write-in-progress"),
        pytest.param("sources/0/0", True, id="source-initial-offset"),
        pytest.param("sources/0/6", True, id="source-log-of-planned-batch"),
        pytest.param("sources/0/7", True, id="source-log-keyed-by-log-offset-not-batch"),
        pytest.param("sources/1/4.compact", True, id="source-compacted-log"),
        pytest.param("state/0/2/6.changelog", True, id="rocksdb-changelog-of-batch-state"),
        pytest.param("state/0/2/7.changelog", True, id="rocksdb-changelog-the-planned-batch-wrote"),
        pytest.param("state/0/2/8.changelog", False, id="rocksdb-changelog-ahead"),
        pytest.param("state/0/2/6.zip", True, id="rocksdb-snapshot"),
        pytest.param("state/0/2/8.zip", False, id="rocksdb-snapshot-ahead"),
        pytest.param("state/0/2/6_3f2a.zip", True, id="rocksdb-checkpoint-v2-name"),
        pytest.param("state/0/2/8_3f2a.changelog", False, id="rocksdb-checkpoint-v2-ahead"),
        pytest.param("state/0/2/SSTs/000123-9c1d.sst", True, id="sst-immutable"),
        pytest.param("state/0/2/4.delta", True, id="hdfs-delta"),
        pytest.param("state/0/2/8.delta", False, id="hdfs-delta-ahead"),
        pytest.param("state/0/2/6.snapshot", True, id="hdfs-snapshot"),
        pytest.param("state/0/_metadata/metadata", True, id="operator-metadata-v1"),
        pytest.param("state/0/0/_metadata/schema", True, id="state-schema"),
        pytest.param("state/0/_metadata/v2/6", True, id="operator-metadata-v2"),
        pytest.param("state/0/_metadata/v2/9", False, id="operator-metadata-v2-ahead"),
        pytest.param("state/1/_stateSchema/default/9_abc", False, id="state-schema-v3-ahead"),
        pytest.param("state/0/2/.6.zip.crc", False, id="state-crc"),
    ],
)
def test_snapshot_of_batch_5_takes(path: str, included: bool) -> None:
    assert ckpt.include_in_snapshot(path, 5) is included


def test_latest_committed_ignores_crc_temp_and_planned_batches() -> None:
    paths = ["commits/0", "commits/1", "commits/.2.crc", "commits/.2.x.tmp", "offsets/2", "commits/10"]
    assert ckpt.committed_batches(paths) == [0, 1, 10]
    assert ckpt.latest_committed(paths) == 10
    assert ckpt.latest_committed(["offsets/0", "metadata"]) is None


def test_select_snapshot_refuses_an_uncommitted_batch() -> None:
    files = [StoredFile(p, 1) for p in ("metadata", "offsets/0", "offsets/1", "commits/0")]
    assert [f.path for f in ckpt.select_snapshot(files, 0)] == ["commits/0", "metadata", "offsets/0", "offsets/1"]
    with pytest.raises(ckpt.CheckpointError, match="commits/1 is missing"):
        ckpt.select_snapshot(files, 1)


def test_offset_log_yields_partitions_provider_and_watermark() -> None:
    text = 'v1\n{"batchWatermarkMs":1700,"batchTimestampMs":1800,"conf":{"spark.sql.shuffle.partitions":"8",' \
        '"spark.sql.streaming.stateStore.providerClass":"x.RocksDB"}}\n{"0":1}\n'
    entry = ckpt.parse_offset_log(3, text)
    assert (entry.state_partitions, entry.state_store_provider, entry.watermark_ms) == (8, "x.RocksDB", 1700)
    assert ckpt.parse_commit_log('v1\n{"nextBatchWatermarkMs":42}') == 42


@pytest.mark.parametrize(
    ("uri", "scheme", "bucket", "path"),
    [
        pytest.param("s3://b1/a/b/", "s3", "b1", "a/b", id="s3"),
        pytest.param("s3a://b1/a", "s3", "b1", "a", id="s3a-is-s3"),
        pytest.param("s3://b1", "s3", "b1", "", id="bucket-root"),
        pytest.param("file:///tmp/cp/", "file", "", "/tmp/cp", id="file"),
        pytest.param("/tmp/cp", "file", "", "/tmp/cp", id="bare-absolute-path"),
    ],
)
def test_parse_location(uri: str, scheme: str, bucket: str, path: str) -> None:
    loc = parse_location(uri)
    assert (loc.scheme, loc.bucket, loc.path) == (scheme, bucket, path)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        pytest.param("hdfs://nn/cp", "unsupported scheme 'hdfs'", id="hdfs"),
        pytest.param("s3:///key", "no bucket", id="no-bucket"),
        pytest.param("file://host/cp", "must be local", id="remote-file"),
        pytest.param("relative/cp", "unsupported scheme", id="relative"),
        pytest.param("s3://b/a/../c", "'..'", id="dot-dot"),
    ],
)
def test_parse_location_refuses(uri: str, message: str) -> None:
    with pytest.raises(LocationError) as info:
        parse_location(uri)
    assert uri in str(info.value) and message in str(info.value)


def _manifest() -> sp.Manifest:
    return sp.build_manifest(
        job_name="orders", job_namespace="team-a", job_hash="h1", spark_version="4.3.0", state_partitions=4,
        state_store_provider="p", batch_id=7, watermark_ms=None, created_at=datetime(2026, 1, 2, tzinfo=timezone.utc),
        source_checkpoint="s3a://b/cp",
        files=[("metadata", 45, "a" * 64), ("offsets/7", 10, "b" * 64), ("offsets/8", 10, "c" * 64),
               ("commits/7", 5, "d" * 64), ("state/1/0/8.changelog", 9, "e" * 64), ("state/0/0/8.zip", 9, "f" * 64)],
    )


def test_manifest_records_planned_batch_operators_and_round_trips() -> None:
    manifest = _manifest()
    assert manifest.planned_batch_id == 8
    assert manifest.state_operators == [0, 1]
    assert manifest.total_bytes == 88
    assert sp.parse_manifest("s3://b/sp", manifest.to_json()) == manifest


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda d: d.pop("batch_id"), "field batch_id: Field required", id="missing-field"),
        pytest.param(lambda d: d.update(format_version=2), "format_version 2 is not supported", id="future-format"),
        pytest.param(lambda d: d["files"][0].update(sha256="xyz"), "field files.0.sha256", id="bad-checksum-text"),
        pytest.param(lambda d: d["files"].pop(3), "lists no commits/7", id="no-commit"),
        pytest.param(lambda d: d["files"][1].update(path="../x"), "not a relative path", id="escaping-path"),
    ],
)
def test_parse_manifest_refuses(mutate: object, message: str) -> None:
    import json

    data = json.loads(_manifest().to_json())
    data["files"].sort(key=lambda f: ["metadata", "offsets/7", "offsets/8", "commits/7"].index(f["path"]) if f["path"] in ["metadata", "offsets/7", "offsets/8", "commits/7"] else 9)
    mutate(data)  # type: ignore[operator]
    with pytest.raises(sp.ManifestInvalidError) as info:
        sp.parse_manifest("s3://b/sp", json.dumps(data).encode())
    assert str(info.value).startswith("s3://b/sp: _savepoint.json") and message in str(info.value)


def test_parse_manifest_refuses_non_json() -> None:
    with pytest.raises(sp.ManifestInvalidError, match="s3://b/sp: _savepoint.json is not JSON"):
        sp.parse_manifest("s3://b/sp", b"{not json")


def _snapshot_zip(sst_names: list[str]) -> bytes:
    import io
    import json as _json
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        archive.writestr("metadata", "v1\n" + _json.dumps({"sstFiles": [{"dfsSstFileName": n} for n in sst_names]}))
    return buf.getvalue()


def test_snapshot_zip_names_the_ssts_it_uses_and_garbage_is_unknown():
    from streamjob_contract.checkpoint import sst_files_of_snapshot

    assert sst_files_of_snapshot(_snapshot_zip(["000008-a.sst", "000009-b.sst"])) == {"000008-a.sst", "000009-b.sst"}
    assert sst_files_of_snapshot(b"not a zip") is None


def test_ssts_no_chosen_snapshot_uses_are_left_out_of_a_running_snapshot():
    from streamjob_contract.checkpoint import drop_unreferenced_ssts
    from streamjob_contract.s3 import StoredFile

    files = [
        StoredFile("state/0/0/2.zip", 10),
        StoredFile("state/0/0/SSTs/000008-a.sst", 5),
        StoredFile("state/0/0/SSTs/000010-inflight.sst", 0),  # a newer version, still being written
        StoredFile("state/0/1/SSTs/000003-c.sst", 7),  # partition 1: unknown references, kept
        StoredFile("state/0/2/SSTs/000004-d.sst", 7),  # partition 2: no chosen zip, changelogs only
        StoredFile("offsets/2", 1),
    ]
    kept = drop_unreferenced_ssts(files, {"state/0/0": {"000008-a.sst"}, "state/0/1": None, "state/0/2": set()})
    assert [f.path for f in kept] == [
        "state/0/0/2.zip", "state/0/0/SSTs/000008-a.sst", "state/0/1/SSTs/000003-c.sst", "offsets/2",
    ]
