"""Truth tables for the pure decisions: checkpoint recovery (job_runtime.checkpoints.recovery) and
allowNonRestoredState (job_runtime.checkpoints.nonrestored).

Listings are what a killed driver leaves, as tests/runtime/test_runtime_kill_points.py
and tests/savepoints/test_checkpoint_recovery.py produce them with real Spark; the
Spark error texts are Spark 4.3's own, captured from real runs.
"""

from __future__ import annotations

import uuid

import pytest
from runtime_harness import S3_BUCKET as BUCKET

from job_runtime.checkpoints import nonrestored, recovery
from job_runtime.checkpoints.recovery import Action, CheckpointDamagedError
from streamjob_contract.s3 import S3Config, Store, parse_location
from testbed.s3 import S3Server


def offsets(log_offset: int) -> bytes:
    return b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"2"}}\n' + (
        b'{"logOffset":%d}' % log_offset
    )


COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'
META = b'{"id":"4f2c7d2e-1b7b-4f53-9c43-3a3c7c6b9c1e"}'
SOURCE = b'v1\n{"path":"file:///in/events-00000.json","timestamp":1,"batchId":0}'
KAFKA_INITIAL = b'\x00v1\n{"events":{"0":0}}'
CRC = b"crc\x00\x00\x00\x02\x00\x12\x34\x56\x78"


def committed(upto: int) -> dict[str, bytes]:
    """A clean checkpoint whose batches 0..upto committed (one source-log entry per batch)."""
    files = {"metadata": META, ".metadata.crc": CRC}
    for batch in range(upto + 1):
        files[f"offsets/{batch}"] = offsets(batch)
        files[f"offsets/.{batch}.crc"] = CRC
        files[f"commits/{batch}"] = COMMIT
        files[f"sources/0/{batch}"] = SOURCE
        files[f"state/0/0/{batch + 1}.changelog"] = b"changelog"
        files[f"state/0/0/.{batch + 1}.changelog.crc"] = CRC
    files["state/0/_metadata/metadata"] = b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"}}'
    return files


def plan(files: dict[str, bytes]) -> set[tuple[str, str]]:
    actions = recovery.plan_recovery({p: len(b) for p, b in files.items()}, files.__getitem__, "file:///ckpt")
    return {(a.kind, a.path) for a in actions}


FRESH = {"metadata": META, ".metadata.crc": CRC, "sources/0/0": SOURCE, "sources/0/.0.crc": CRC}
UUID = "0f9c1c1e-5b0a-4a43-8a29-3f36e1b0e6c2"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(committed(3), set(), id="clean-committed-checkpoint"),
        pytest.param({**committed(3), "offsets/4": offsets(4), "sources/0/4": SOURCE}, set(), id="planned-batch-kept"),
        pytest.param(
            {**FRESH, f"offsets/.0.{UUID}.tmp": b"", f"offsets/..0.{UUID}.tmp.crc": b""},
            {("delete", f"offsets/.0.{UUID}.tmp"), ("delete", f"offsets/..0.{UUID}.tmp.crc")},
            id="first-offsets-write-killed(the-reported-bug)",
        ),
        pytest.param(
            {**FRESH, f"offsets/.0.{UUID}.tmp": offsets(0)},
            {("delete", f"offsets/.0.{UUID}.tmp")},
            id="s3a-rename-never-done(complete-temporary-object)",
        ),
        pytest.param(
            {f".metadata.{UUID}.tmp": b"", f"..metadata.{UUID}.tmp.crc": b""},
            {("delete", f".metadata.{UUID}.tmp"), ("delete", f"..metadata.{UUID}.tmp.crc")},
            id="metadata-write-killed",
        ),
        pytest.param(
            {**committed(2), "offsets/3": offsets(3), f"commits/.3.{UUID}.tmp": b"v1\n"},
            {("delete", f"commits/.3.{UUID}.tmp")},
            id="commit-write-killed",
        ),
        pytest.param(
            {**committed(2), "offsets/3": offsets(3), f"state/0/1/.4.changelog.{UUID}.TID7.tmp": b"x"},
            {("delete", f"state/0/1/.4.changelog.{UUID}.TID7.tmp")},
            id="state-commit-killed",
        ),
        pytest.param(
            {**committed(2), "commits/2": b""},
            {("move", "commits/2")},
            id="empty-latest-commit(batch-re-runs)",
        ),
        pytest.param({**committed(2), "commits/1": b""}, set(), id="empty-older-commit-never-read"),
        pytest.param(
            {**committed(2), "offsets/3": b"", "offsets/.3.crc": CRC},
            {("move", "offsets/3"), ("delete", "offsets/.3.crc")},
            id="empty-planned-offsets(batch-never-ran)",
        ),
        pytest.param(
            {**committed(2), "offsets/3": offsets(3)[:40]},
            {("move", "offsets/3")},
            id="truncated-planned-offsets",
        ),
        pytest.param(
            {**FRESH, "offsets/0": b""},
            {("move", "offsets/0")},
            id="empty-first-offsets",
        ),
        pytest.param(
            {**FRESH, "metadata": b""},
            {("move", "metadata"), ("delete", ".metadata.crc")},
            id="empty-metadata-nothing-committed",
        ),
        pytest.param(
            {**committed(2), "sources/0/3": b""},
            {("move", "sources/0/3")},
            id="empty-source-entry-no-batch-uses",
        ),
        pytest.param(
            {**committed(2), "sources/0/3": b'v1\n{"path":"file:///in/e'},
            {("move", "sources/0/3")},
            id="truncated-source-entry-no-batch-uses",
        ),
        pytest.param({**committed(2), "sources/0/0": KAFKA_INITIAL, "sources/0/1": KAFKA_INITIAL, "sources/0/2": KAFKA_INITIAL},
                     set(), id="kafka-initial-offsets-format"),
        pytest.param(
            {**FRESH, "state/0/0/1.changelog": b"x", "state/0/0/.1.changelog.crc": CRC},
            {("move", "state/0/0/1.changelog"), ("delete", "state/0/0/.1.changelog.crc")},
            id="state-without-any-planned-batch",
        ),
        pytest.param({**committed(2), "offsets/.5.crc": CRC}, {("delete", "offsets/.5.crc")}, id="orphan-checksum"),
        pytest.param(
            {**committed(1), "_streamjob_recovered/20260101T000000Z/offsets/2": b""},
            set(),
            id="files-moved-aside-earlier-are-left-alone",
        ),
        pytest.param({**committed(1), "_streamjob_owner.json": b"{}"}, set(), id="owner-marker-untouched"),
    ],
)
def test_recovery_plan(files: dict[str, bytes], expected: set[tuple[str, str]]) -> None:
    assert plan(files) == expected


@pytest.mark.parametrize(
    ("files", "names"),
    [
        pytest.param({**committed(2), "metadata": b""}, "metadata", id="empty-metadata-with-commits"),
        pytest.param({**committed(2), "offsets/2": b""}, "offsets/2", id="empty-offsets-of-committed-batch"),
        pytest.param({**committed(2), "offsets/3": offsets(3), "offsets/2": b""}, "offsets/2", id="empty-offsets-before-planned"),
        pytest.param({**committed(2), "commits/2": b"", "commits/1": b""}, "commits/1", id="two-unreadable-commits"),
        pytest.param({k: v for k, v in committed(2).items() if k != "offsets/2"}, "offsets/2", id="commit-without-offsets"),
        pytest.param({**committed(2), "sources/0/2": b""}, "sources/0/2", id="empty-source-entry-a-batch-used"),
        pytest.param({**FRESH, "commits/0": COMMIT}, "commits/0", id="commit-but-no-offsets-at-all"),
    ],
)
def test_recovery_refuses_to_touch_what_a_committed_batch_needs(files: dict[str, bytes], names: str) -> None:
    with pytest.raises(CheckpointDamagedError, match=names) as refused:
        plan(files)
    assert "restore the job from a savepoint into a fresh checkpoint location" in str(refused.value)


def test_recovery_keeps_the_moved_file_and_removes_it_from_the_checkpoint(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    root = Path(str(tmp_path)) / "ckpt"
    for path, data in {**committed(1), "offsets/2": b"", f"offsets/.2.{UUID}.tmp": b""}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    done = recovery.recover_checkpoint(root.as_uri(), job="tests/job")
    assert {(a.kind, a.path) for a in done} == {("move", "offsets/2"), ("delete", f"offsets/.2.{UUID}.tmp")}
    assert not (root / "offsets" / "2").exists() and not (root / "offsets" / f".2.{UUID}.tmp").exists()
    moved = list((root / recovery.QUARANTINE_DIR).rglob("offsets/2"))
    assert len(moved) == 1 and moved[0].read_bytes() == b""
    assert recovery.recover_checkpoint(root.as_uri(), job="tests/job") == [], "a second pass finds nothing"
    assert all(isinstance(a, Action) for a in done)


def test_recovery_on_s3_moves_aside_and_removes(s3_server: S3Server) -> None:
    c = s3_server.credentials
    config = S3Config(endpoint_url=c.endpoint, region=c.region, access_key_id=c.access_key, secret_access_key=c.secret_key)
    uri = f"s3a://{BUCKET}/recovery-{uuid.uuid4().hex[:8]}/ckpt"
    store = Store(parse_location(uri), config.client())
    files = {p: b for p, b in committed(1).items() if not p.rsplit("/", 1)[-1].startswith(".")}
    for path, data in {**files, "offsets/2": b"", f"offsets/.2.{UUID}.tmp": offsets(2)}.items():
        store.write_bytes(path, data)
    done = recovery.recover_checkpoint(uri, job="tests/job", s3=config)
    assert {(a.kind, a.path) for a in done} == {("move", "offsets/2"), ("delete", f"offsets/.2.{UUID}.tmp")}
    left = {f.path for f in store.list()}
    assert "offsets/2" not in left and f"offsets/.2.{UUID}.tmp" not in left and "offsets/1" in left
    moved = [p for p in left if p.startswith(recovery.QUARANTINE_DIR + "/")]
    assert len(moved) == 1 and moved[0].endswith("/offsets/2") and store.read_bytes(moved[0]) == b""


NOT_MATCH = (
    "[STREAM_FAILED] Query [id = 0d41706b, runId = ec5fdd85] terminated with exception: "
    "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name does not match with "
    "the operator in state metadata. This likely to happen when user adds/removes/changes stateful operator of "
    "existing streaming query.\nStateful operators in the metadata: [{checkpoint}]; Stateful operators in current "
    "batch: [{query}]. SQLSTATE: 42K03 SQLSTATE: XXKST"
)
AGG, DEDUP = "(OperatorId: 0 -> OperatorName: stateStoreSave)", "(OperatorId: 1 -> OperatorName: dedupe)"
DEDUP_AT_0 = "(OperatorId: 0 -> OperatorName: dedupe)"
MISSING = (
    "[STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY] Cannot restart streaming query with stateful operators "
    "because the state directory is empty or missing.\nStateful operators in current batch: [(OperatorId: 0 -> "
    "OperatorName: dedupe)]."
)


@pytest.mark.parametrize(
    ("message", "allow", "drop", "refusal"),
    [
        pytest.param(NOT_MATCH.format(checkpoint=f"{AGG}, {DEDUP}", query=AGG), True, {1: "dedupe"}, None, id="removed-with-flag"),
        pytest.param(
            NOT_MATCH.format(checkpoint=f"{AGG}, {DEDUP}", query=AGG), False, {},
            "no longer has (1 dedupe); set spec.allowNonRestoredState", id="removed-without-flag",
        ),
        pytest.param(
            NOT_MATCH.format(checkpoint=f"{AGG}, {DEDUP}", query=DEDUP_AT_0), True, {},
            "no state can be restored for 0 dedupe, with or without allowNonRestoredState", id="renumbered",
        ),
        pytest.param(
            NOT_MATCH.format(checkpoint=AGG, query=f"{AGG}, {DEDUP}"), True, {},
            "no state can be restored for 1 dedupe", id="added",
        ),
        pytest.param(MISSING, True, {}, "Spark cannot add state to a query that ran without it", id="state-missing"),
    ],
)
def test_non_restored_state_decision(message: str, allow: bool, drop: dict[int, str], refusal: str | None) -> None:
    decision = nonrestored.decide(message, allow_non_restored_state=allow, checkpoint="file:///ckpt")
    assert decision is not None
    assert decision.drop == drop
    if refusal is None:
        assert decision.refusal is None
    else:
        assert decision.refusal is not None and refusal in decision.refusal, decision.refusal


def test_other_failures_are_not_operator_changes() -> None:
    assert nonrestored.decide("[CANNOT_LOAD_STATE_STORE] boom", allow_non_restored_state=True, checkpoint="x") is None
    assert not nonrestored.is_operator_check("[CANNOT_LOAD_STATE_STORE] boom")
    assert nonrestored.is_operator_check(MISSING)
    assert nonrestored.is_operator_check(NOT_MATCH.format(checkpoint=AGG, query=DEDUP_AT_0))
