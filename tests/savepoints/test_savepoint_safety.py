"""Writing and deleting savepoints never deletes what they did not write, on S3 and on local disk.

- the confinement rule of POST /savepoints (pure truth table);
- a target holding anyone else's files, or a completed savepoint, is refused and
  left as it was; an incomplete savepoint of ours (its in-progress marker) is redone;
- delete needs a valid manifest (a checkpoint or a prefix of savepoints is
  refused), removes only what the manifest lists, and resumes when interrupted;
- the CLI's delete and restore ask, or need --yes, and change nothing otherwise.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from job_runtime import savepoints as sp
from streamjob_contract.s3 import S3Config, Store, parse_location
from job_runtime.savepoints.target import SavepointPathError, confine
from savepoint_helpers import RealCheckpoint

JOB = {"job_name": "counts", "job_namespace": "team-a", "job_hash": "abc123", "spark_version": "4.3.0"}
FOREIGN = {"data/part-00000.parquet": b"PAR1 not ours", "README": b"keep me"}

LOC = "s3://bucket/jobs/wc/savepoints"
CKPT = "s3a://bucket/jobs/wc/checkpoints/run-2"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        (f"{LOC}/wc-20260101T000000Z-manual", True),
        ("s3a://bucket/jobs/wc/savepoints/wc-x/nested", True),  # s3a:// is the same store
        (f"{LOC}/", False),  # the location itself: every savepoint of the job lives there
        (LOC, False),
        ("s3://bucket/jobs/wc/savepoints-other/sp", False),  # a sibling sharing the name's start
        ("s3://bucket/jobs/wc/checkpoints/run-2", False),
        ("s3://bucket/jobs/wc", False),
        ("s3://other-bucket/jobs/wc/savepoints/sp", False),
        (f"{LOC}/../checkpoints/run-2", False),
        ("file:///jobs/wc/savepoints/sp", False),
        ("/jobs/wc/savepoints/sp", False),
        ("hdfs://nn/jobs/wc/savepoints/sp", False),
        (f"{LOC}/sp?versionId=1", False),
    ],
)
def test_confinement_rule(path: str, allowed: bool) -> None:
    if allowed:
        assert confine(path, LOC, CKPT) == path
    else:
        with pytest.raises(SavepointPathError) as info:
            confine(path, LOC, CKPT)
        assert path in str(info.value)


def test_confinement_refuses_the_checkpoint_inside_the_location_and_no_location() -> None:
    with pytest.raises(SavepointPathError, match="overlaps the job's checkpoint location"):
        confine("file:///data/job/run-1/sp", "file:///data/job", "file:///data/job/run-1")
    with pytest.raises(SavepointPathError, match="overlaps the job's checkpoint location"):
        confine("file:///data/job/runs", "file:///data/job", "file:///data/job/runs/run-1")
    with pytest.raises(SavepointPathError, match="no --savepoint-location"):
        confine("s3://b/sp", None, CKPT)
    assert confine("file:///data/job/sp-1", "file:///data/job/", "file:///data/job/run-1") == "file:///data/job/sp-1"


@pytest.fixture(params=["s3", "file"])
def base(request: pytest.FixtureRequest, s3_prefix: str, tmp_path: Path) -> str:
    return s3_prefix if request.param == "s3" else (tmp_path / "store").as_uri()


def store(uri: str, s3_config: S3Config) -> Store:
    loc = parse_location(uri)
    return Store(loc, s3_config.client() if loc.scheme == "s3" else None)


def contents(uri: str, s3_config: S3Config) -> dict[str, bytes]:
    st = store(uri, s3_config)
    return {f.path: st.read_bytes(f.path) for f in st.list()}


def seed(uri: str, files: dict[str, bytes], s3_config: S3Config) -> None:
    st = store(uri, s3_config)
    for path, data in files.items():
        st.write_bytes(path, data)


def test_a_target_holding_foreign_files_is_refused_and_they_survive(
    real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str
) -> None:
    target = f"{base}/export"
    seed(target, FOREIGN, s3_config)
    with pytest.raises(sp.SavepointTargetNotEmptyError) as info:
        sp.write_savepoint(real_checkpoint.uri, target, s3_config=s3_config, **JOB)
    assert str(info.value).startswith(f"{target}: holds files that are not a savepoint in progress of ours (first: ")
    assert str(info.value).endswith("nothing was deleted")
    assert contents(target, s3_config) == FOREIGN


def test_a_completed_savepoint_is_never_overwritten(real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str) -> None:
    target = f"{base}/sp"
    first = sp.write_savepoint(real_checkpoint.uri, target, s3_config=s3_config, **JOB)
    before = contents(target, s3_config)
    with pytest.raises(sp.SavepointTargetNotEmptyError, match="holds a completed savepoint"):
        sp.write_savepoint(real_checkpoint.uri, target, batch_id=1, s3_config=s3_config, **JOB)
    assert contents(target, s3_config) == before
    assert sp.validate_savepoint(target, s3_config=s3_config).batch_id == first.batch_id == 3


def test_an_incomplete_savepoint_of_ours_is_redone_cleanly(real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str) -> None:
    target = f"{base}/sp"
    # what a writer killed mid-copy leaves: its marker and some files, one of them a later batch's
    seed(target, {sp.IN_PROGRESS_MARKER: b'{"job": "team-a/counts"}', "commits/3": b"v1\n{}", "offsets/3": b"half"}, s3_config)
    redone = sp.write_savepoint(real_checkpoint.uri, target, batch_id=1, s3_config=s3_config, **JOB)
    stored = set(contents(target, s3_config))
    assert stored == {f.path for f in redone.files} | {sp.MANIFEST_NAME}
    assert "commits/3" not in stored and "offsets/3" not in stored and "commits/1" in stored
    assert sp.validate_savepoint(target, s3_config=s3_config).batch_id == 1


def test_delete_needs_a_manifest_and_refuses_checkpoints_and_prefixes(
    real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str
) -> None:
    checkpoint_like = {"metadata": b'{"id":"q"}', "offsets/0": b"v1\n{}", "commits/0": b"v1\n{}", "state/0/0/1.changelog": b"x"}
    seed(f"{base}/checkpoints/run-1", checkpoint_like, s3_config)
    sp.write_savepoint(real_checkpoint.uri, f"{base}/savepoints/sp-a", s3_config=s3_config, **JOB)
    everything = contents(base, s3_config)

    for uri in (f"{base}/checkpoints/run-1", f"{base}/savepoints", base):
        with pytest.raises(sp.SavepointNotFoundError) as info:
            sp.delete_savepoint(uri, s3_config=s3_config)
        assert str(info.value) == f"{uri}: no _savepoint.json: not a completed savepoint, refusing to delete anything here"
    store(f"{base}/bad", s3_config).write_bytes(sp.MANIFEST_NAME, b"{not json")
    with pytest.raises(sp.ManifestInvalidError):
        sp.delete_savepoint(f"{base}/bad", s3_config=s3_config)
    assert sp.delete_savepoint(f"{base}/nothing-here", s3_config=s3_config) == 0  # deleted already: a no-op
    assert {p: b for p, b in contents(base, s3_config).items() if not p.startswith("bad/")} == everything
    sp.validate_savepoint(f"{base}/savepoints/sp-a", s3_config=s3_config)


def test_delete_removes_only_what_the_manifest_lists_and_resumes(
    real_checkpoint: RealCheckpoint, s3_config: S3Config, base: str
) -> None:
    target = f"{base}/sp"
    manifest = sp.write_savepoint(real_checkpoint.uri, target, s3_config=s3_config, **JOB)
    seed(target, {"NOTES.md": b"someone's notes"}, s3_config)
    assert sp.delete_savepoint(target, s3_config=s3_config) == len(manifest.files) + 1
    assert contents(target, s3_config) == {"NOTES.md": b"someone's notes"}

    # a delete killed after the manifest went: run again, it finishes from its copy of the manifest
    other = f"{base}/sp2"
    manifest = sp.write_savepoint(real_checkpoint.uri, other, s3_config=s3_config, **JOB)
    st = store(other, s3_config)
    st.write_bytes(sp.DELETING_MARKER, st.read_bytes(sp.MANIFEST_NAME))
    st.delete([sp.MANIFEST_NAME, manifest.files[0].path])
    assert sp.delete_savepoint(other, s3_config=s3_config) == len(manifest.files) + 1
    assert contents(other, s3_config) == {}
    if other.startswith("file://"):
        assert not Path(parse_location(other).path).exists(), "empty directories were left behind"


def _cli_env(s3_config: S3Config) -> dict[str, str]:
    return {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_config.endpoint_url or "",
        "AWS_ACCESS_KEY_ID": s3_config.access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": s3_config.secret_access_key or "",
        "AWS_REGION": s3_config.region or "us-east-1",
    }


def _cli(s3_config: S3Config, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a script runs it: stdin is not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "job_runtime.savepoints.cli", *args],
        env=_cli_env(s3_config), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def s3_savepoint(real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_prefix: str) -> Iterator[str]:
    uri = f"{s3_prefix}/sp"
    sp.write_savepoint(real_checkpoint.uri, uri, s3_config=s3_config, **JOB)
    yield uri


def test_cli_delete_needs_confirmation(s3_config: S3Config, s3_savepoint: str, s3_prefix: str) -> None:
    refused = _cli(s3_config, "delete", s3_savepoint)
    assert refused.returncode == 3, refused
    assert refused.stderr.startswith(f"refused: delete savepoint {s3_savepoint} (")
    assert "not confirmed: pass --yes to confirm when not on a terminal; nothing was changed" in refused.stderr
    sp.validate_savepoint(s3_savepoint, s3_config=s3_config)

    # a typo'd prefix is refused before anything is asked
    prefix = _cli(s3_config, "delete", "--yes", s3_prefix)
    assert prefix.returncode == 3 and "no _savepoint.json" in prefix.stderr, prefix
    sp.validate_savepoint(s3_savepoint, s3_config=s3_config)

    done = _cli(s3_config, "delete", "--yes", s3_savepoint)
    assert done.returncode == 0, done.stderr
    assert contents(s3_savepoint, s3_config) == {}


def test_cli_restore_asks_before_removing_files_in_the_target(
    s3_config: S3Config, s3_savepoint: str, tmp_path: Path
) -> None:
    target = tmp_path / "cp"
    target.mkdir()
    (target / "offsets").mkdir()
    (target / "offsets" / "0").write_text("v1\n{}")  # a query that never committed: restore would remove it
    refused = _cli(s3_config, "restore", s3_savepoint, target.as_uri(), "--partitions", "3")
    assert refused.returncode == 3, refused
    assert "removing the 1 file(s) there that hold no committed batch?: not confirmed" in refused.stderr
    assert (target / "offsets" / "0").read_text() == "v1\n{}"
    done = _cli(s3_config, "restore", "--yes", s3_savepoint, target.as_uri(), "--partitions", "3")
    assert done.returncode == 0, done.stderr
    assert (target / "commits" / "3").exists()


def _cli_on_a_terminal(s3_config: S3Config, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with a pseudo-terminal as stdin, answering the prompt with `answer`."""
    master, slave = pty.openpty()
    try:
        os.write(master, answer.encode() + b"\n")
        return subprocess.run(
            [sys.executable, "-m", "job_runtime.savepoints.cli", *args],
            env=_cli_env(s3_config), capture_output=True, text=True, timeout=120, stdin=slave,
        )
    finally:
        os.close(slave)
        os.close(master)


def test_cli_delete_asks_on_a_terminal(s3_config: S3Config, s3_savepoint: str) -> None:
    declined = _cli_on_a_terminal(s3_config, "n", "delete", s3_savepoint)
    assert declined.returncode == 3, declined
    assert f"delete savepoint {s3_savepoint} (" in declined.stderr and "[y/N]" in declined.stderr
    assert "not confirmed; nothing was changed" in declined.stderr
    sp.validate_savepoint(s3_savepoint, s3_config=s3_config)

    accepted = _cli_on_a_terminal(s3_config, "y", "delete", s3_savepoint)
    assert accepted.returncode == 0, accepted.stderr
    assert contents(s3_savepoint, s3_config) == {}
