"""Every leftover a killed driver (or a damaged copy) can leave, built from a real checkpoint, on disk and on S3.

Each case takes the session's real RocksDB checkpoint (4 committed batches),
changes it the way the instant in question leaves it, shows that Spark 4.3 fails
on it unrepaired, runs job_runtime.checkpoints.recovery, and
checks that Spark then resumes with the state computed independently
(savepoint_helpers.expected_counts): nothing lost, nothing twice. Cases that
must not be repaired are refused with the checkpoint left as it was.
Leftovers Spark copes with by itself (a temporary file in commits/ or state/, a
planned batch without its commit, an orphan checksum) are in the decision table of
tests/runtime/test_runtime_recovery_rules.py and hit by real kills in
tests/runtime/test_runtime_kill_points.py and test_runtime_kills_random.py.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from job_runtime.checkpoints import recovery
from streamjob_contract.s3 import S3Config, Store, parse_location

from savepoint_helpers import BUCKET, RealCheckpoint, expected_counts, input_file, read_state, run_to_end, write_input

TMP = f"{uuid.uuid4()}"


def with_extra_file(spark: Any, real: RealCheckpoint, checkpoint: str, tmp_path: Path, index: int) -> dict[str, int]:
    """Resume over the original input plus one new file (in its own folder, read through a glob)."""
    extra = real.input_dir.parent / f"extra-{tmp_path.name}-{index}"
    write_input(extra, index)
    run_to_end(spark, Path(f"{real.input_dir.parent}/{{{real.input_dir.name},{extra.name}}}"), checkpoint)
    return read_state(spark, checkpoint)


def plus(files: int, index: int) -> dict[str, int]:
    counts = dict(expected_counts(files))
    for row in input_file(index):
        counts[row["key"]] = counts.get(row["key"], 0) + 1
    return counts


def spark_failure(spark: Any, input_dir: Path, checkpoint: str) -> str:
    try:
        run_to_end(spark, input_dir, checkpoint)
    except Exception as exc:  # the query's failure, as Spark words it
        return str(exc)
    return ""


def fresh_start(cp: Path) -> None:
    """What the first offset-log write killed leaves: metadata, the source's first entry, temporaries."""
    for top in ("offsets", "commits", "state"):
        shutil.rmtree(cp / top)
    for entry in (cp / "sources" / "0").iterdir():
        if entry.name not in ("0", ".0.crc"):
            entry.unlink()
    (cp / "offsets").mkdir()
    (cp / "commits").mkdir()
    (cp / "offsets" / f".0.{TMP}.tmp").write_bytes(b"")
    (cp / "offsets" / f"..0.{TMP}.tmp.crc").write_bytes(b"")


def next_offsets(cp: Path, data: bytes) -> None:
    """offsets/4, the planned batch's entry, with these bytes."""
    (cp / "offsets" / "4").write_bytes(data)


def truncate(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])
    crc = path.with_name(f".{path.name}.crc")
    crc.unlink(missing_ok=True)


# (id, change, Spark's failure without recovery, what recovery does)
CASES: list[tuple[str, Callable[[Path], None], str, set[tuple[str, str]]]] = [
    (
        "first-offsets-write-killed",
        fresh_start,
        "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY",
        {("delete", f"offsets/.0.{TMP}.tmp"), ("delete", f"offsets/..0.{TMP}.tmp.crc")},
    ),
    ("empty-planned-offsets", lambda cp: next_offsets(cp, b""), "Incomplete log file", {("move", "offsets/4")}),
    (
        "truncated-planned-offsets",
        lambda cp: next_offsets(cp, (cp / "offsets" / "3").read_bytes()[:300]),
        "Unexpected end-of-input",
        {("move", "offsets/4")},
    ),
    (
        "empty-latest-commit",
        lambda cp: truncate(cp / "commits" / "3", 0),
        "Incomplete log file in the offset commit log",
        {("move", "commits/3")},
    ),
    (
        "empty-source-entry-no-batch-uses",
        lambda cp: (cp / "sources" / "0" / "4").write_bytes(b""),
        "Incomplete log file",
        {("move", "sources/0/4")},
    ),
]


@pytest.mark.parametrize(("change", "failure", "repairs"), [pytest.param(c, f, r, id=i) for i, c, f, r in CASES])
def test_recovery_on_disk_then_spark_resumes_exactly(
    spark: Any, real_checkpoint: RealCheckpoint, tmp_path: Path,
    change: Callable[[Path], None], failure: str, repairs: set[tuple[str, str]],
) -> None:
    cp = real_checkpoint.copy_to(tmp_path / "cp")
    change(cp)
    shutil.copytree(cp, tmp_path / "unrepaired")  # on a copy: a failed query may leave files of its own
    found = spark_failure(spark, real_checkpoint.input_dir, f"file://{tmp_path / 'unrepaired'}")
    assert failure in found, found
    done = recovery.recover_checkpoint(f"file://{cp}", job="tests/recovery")
    assert {(a.kind, a.path) for a in done} == repairs
    assert with_extra_file(spark, real_checkpoint, f"file://{cp}", tmp_path, 10) == plus(real_checkpoint.files, 10)


def test_damage_to_what_a_committed_batch_needs_is_refused_and_left_alone(real_checkpoint: RealCheckpoint, tmp_path: Path) -> None:
    cp = real_checkpoint.copy_to(tmp_path / "cp")
    (cp / "metadata").write_bytes(b"")
    truncate(cp / "offsets" / "3", 100)
    before = sorted((p.relative_to(cp).as_posix(), p.stat().st_size) for p in cp.rglob("*") if p.is_file())
    with pytest.raises(recovery.CheckpointDamagedError, match="offsets/3 is unreadable"):
        recovery.recover_checkpoint(f"file://{cp}", job="tests/recovery")
    after = sorted((p.relative_to(cp).as_posix(), p.stat().st_size) for p in cp.rglob("*") if p.is_file())
    assert after == before


def upload(root: Path, store: Store, only: Callable[[str], bool] = lambda _: True) -> None:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.rsplit("/", 1)[-1].startswith(".") and only(rel):
            store.write_bytes(rel, path.read_bytes())


def test_recovery_on_s3a_then_spark_resumes_exactly(
    spark: Any, real_checkpoint: RealCheckpoint, s3_config: S3Config, s3_client: Any
) -> None:
    """S3 has no local rename: a write killed after the temporary object was stored and before it
    was copied into place leaves that object (Hadoop's rename-based file manager). Moving aside on
S3 is in tests/runtime/test_runtime_recovery_rules.py."""
    prefix = f"s3a://{BUCKET}/recovery-{uuid.uuid4().hex[:8]}"
    fresh = Store(parse_location(f"{prefix}/fresh"), s3_client)
    upload(real_checkpoint.path, fresh, lambda rel: rel in ("metadata", "sources/0/0"))
    fresh.write_bytes(f"offsets/.0.{TMP}.tmp", (real_checkpoint.path / "offsets" / "0").read_bytes())
    failure = spark_failure(spark, real_checkpoint.input_dir, f"{prefix}/fresh")
    assert "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in failure, failure
    done = recovery.recover_checkpoint(f"{prefix}/fresh", job="tests/recovery", s3=s3_config)
    assert [(a.kind, a.path) for a in done] == [("delete", f"offsets/.0.{TMP}.tmp")]
    run_to_end(spark, real_checkpoint.input_dir, f"{prefix}/fresh")
    assert read_state(spark, f"{prefix}/fresh") == expected_counts(real_checkpoint.files)
