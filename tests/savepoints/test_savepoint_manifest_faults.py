"""write_savepoint says, when its manifest write raised, whether the manifest is there (on S3 and on local disk).

The runtime's stop-with-savepoint ends the driver instead of restarting its query on
``ManifestAttemptedError`` (tests/runtime/test_runtime_savepoint_after_manifest.py);
these cases pin what the error carries, with the fault injected by job_runtime.testhooks:

- the manifest PUT fails: ``present`` is False and no manifest exists;
- the manifest is stored and then the call raises (a lost response; the in-progress
  marker not deleted): ``present`` is True, and the savepoint validates and lists
  although the marker is still there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from savepoint_helpers import RealCheckpoint

from job_runtime import savepoints as sp
from job_runtime import testhooks
from job_runtime.testhooks import FAIL_AT
from streamjob_contract.s3 import S3Config, Store, parse_location

JOB = {"job_name": "counts", "job_namespace": "team-a", "job_hash": "abc123", "spark_version": "4.3.0"}


@pytest.fixture(params=["s3", "local"])
def base(request: pytest.FixtureRequest, s3_prefix: str, tmp_path: Path) -> str:
    return s3_prefix if request.param == "s3" else (tmp_path / "store").as_uri()


def names(uri: str, s3_config: S3Config) -> set[str]:
    location = parse_location(uri)
    return {f.path for f in Store(location, s3_config.client() if location.scheme == "s3" else None).list()}


def test_a_failed_manifest_put_says_the_manifest_is_absent(
    real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testhooks, "_fail_counts", {})  # each case's first write is "1"
    monkeypatch.setenv(FAIL_AT, "savepoint-manifest-put:1")
    target = f"{base}/put-failed"
    with pytest.raises(sp.ManifestAttemptedError) as raised:
        sp.write_savepoint(real_checkpoint.uri, target, s3_config=s3_config, **JOB)
    assert raised.value.present is False and raised.value.manifest.batch_id == real_checkpoint.files - 1
    assert "injected fault at savepoint-manifest-put:1" in str(raised.value)
    assert sp.MANIFEST_NAME not in names(target, s3_config) and sp.IN_PROGRESS_MARKER in names(target, s3_config)


def test_a_lost_manifest_response_says_the_manifest_is_present(
    real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testhooks, "_fail_counts", {})
    monkeypatch.setenv(FAIL_AT, "savepoint-manifest-response:1")
    target = f"{base}/response-lost"
    with pytest.raises(sp.ManifestAttemptedError) as raised:
        sp.write_savepoint(real_checkpoint.uri, target, s3_config=s3_config, **JOB)
    assert raised.value.present is True
    assert {sp.MANIFEST_NAME, sp.IN_PROGRESS_MARKER} <= names(target, s3_config)
    manifest = sp.validate_savepoint(target, s3_config=s3_config)
    assert manifest.batch_id == raised.value.manifest.batch_id == real_checkpoint.files - 1
