"""Writing and restoring savepoints: portable, self-describing copies of a checkpoint at a committed batch.

Called by the runtime in the driver (stop-with-savepoint, savepoint-while-running,
restore before start) and by ``job_runtime.savepoint_cli``. Reading, validating and
deleting savepoints, and their format, live in the contract package
(``streamjob_contract.savepoints``, ``streamjob_contract.savepoint_manifest``), which the
operator and the CLI use; this module re-exports them, so the runtime and its tests have
the whole savepoint API in one name. No pyspark import here: only a restore that changes
the state partition count needs Spark, and receives the session from its caller.

A savepoint is a directory: the checkpoint files at their checkpoint-relative paths
plus ``_savepoint.json``, the manifest, written last. No manifest, no savepoint.

Data safety: a writer first claims an empty target with an in-progress marker
(``_streamjob_savepoint_in_progress.json``), and only a target holding that marker
(an incomplete savepoint of ours) is ever cleaned or overwritten. A target with a
manifest (a completed savepoint) or with any other file is refused, nothing
deleted. ``delete_savepoint`` deletes only what a valid manifest lists.
Bytes are moved by the object store where possible: S3 to S3 is a server-side copy
(``copy_object`` with ``ChecksumAlgorithm=SHA256``, the store hashing what it
copied; boto3's managed multipart copy for big files); local to S3 goes through
boto3's transfer manager (parallel, multipart for big files), with the SHA-256 that
was computed locally sent along so the store verifies it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from streamjob_contract import checkpoint as ckpt
from streamjob_contract.s3 import Location, S3Config, Store, StoredFile, parse_location
from streamjob_contract.savepoint_manifest import (  # noqa: F401  (re-exported: the savepoint API)
    DELETING_MARKER,
    FORMAT_VERSION,
    IN_PROGRESS_MARKER,
    MANIFEST_NAME,
    MULTIPART_THRESHOLD,
    RESTORE_MARKER,
    CheckpointSourceError,
    JobRef,
    Manifest,
    ManifestFile,
    ManifestInvalidError,
    RestoreTargetNotEmptyError,
    SavepointChecksumError,
    SavepointError,
    SavepointFileMissingError,
    SavepointFileSizeError,
    SavepointNotFoundError,
    SavepointSummary,
    SavepointTargetNotEmptyError,
    StatePartitionMismatchError,
    build_manifest,
    parse_manifest,
)
from streamjob_contract.savepoints import (  # noqa: F401  (re-exported: the savepoint API)
    delete_savepoint,
    inspect_savepoint,
    list_savepoints,
    unfinished_restore,
    validate_savepoint,
)
from streamjob_contract.savepoints import check_listing, client_for, read_manifest, read_restore_marker
from job_runtime.savepoint_transfer import Transfer

log = logging.getLogger(__name__)


def _without_inflight_ssts(src: Store, files: list[StoredFile]) -> list[StoredFile]:
    """Drops RocksDB SST files no chosen snapshot zip uses (see checkpoint.drop_unreferenced_ssts)."""
    referenced: dict[str, set[str] | None] = {}
    for f in files:
        head, _, name = f.path.rpartition("/")
        if head.startswith("state/") and name.endswith(".zip") and name[:-4].split("_")[0].isdigit():
            names = ckpt.sst_files_of_snapshot(src.read_bytes(f.path))
            if names is None:
                referenced[head] = None
            elif referenced.get(head, set()) is not None:
                referenced[head] = (referenced.get(head) or set()) | names
    # a partition with SSTs but no chosen zip rebuilds its state from changelogs alone
    for f in files:
        head, sep, _ = f.path.rpartition("/SSTs/")
        if sep and head.startswith("state/"):
            referenced.setdefault(head, set())
    return ckpt.drop_unreferenced_ssts(files, referenced)


def write_savepoint(
    checkpoint_location: str,
    savepoint_uri: str,
    *,
    job_name: str,
    job_namespace: str,
    job_hash: str,
    spark_version: str,
    state_partitions: int | None = None,
    batch_id: int | None = None,
    watermark_ms: int | None = None,
    s3_config: S3Config | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
) -> Manifest:
    """Copies the consistent file set of a committed batch to ``savepoint_uri``, manifest last.

    ``batch_id`` defaults to the latest completed batch; the query may keep running,
    files of later batches are left out (``checkpoint.include_in_snapshot``).
    ``state_partitions`` defaults to the count pinned in ``offsets/<batch_id>``; a
    different explicit value is refused. ``watermark_ms`` defaults to the
    ``nextBatchWatermarkMs`` in ``commits/<batch_id>``.

    The target must be empty (it is claimed with ``IN_PROGRESS_MARKER`` before the
    copy) or an incomplete savepoint of ours (the marker is there, no manifest): then
    its stale files go after the copy. Anything else is refused with
    ``SavepointTargetNotEmptyError`` and left as it was: a completed savepoint is never
    overwritten, and files this module did not write are never deleted.
    """
    src_loc = parse_location(checkpoint_location)
    dst_loc = parse_location(savepoint_uri)
    config, client = client_for(src_loc, dst_loc, s3_config=s3_config)
    src, dst = Store(src_loc, client), Store(dst_loc, client)

    listing = [f for f in src.list() if not ckpt.is_hidden(f.path)]
    if batch_id is None:
        batch_id = ckpt.latest_committed(f.path for f in listing)
        if batch_id is None:
            raise CheckpointSourceError(checkpoint_location, "no committed batch in commits/: nothing to savepoint yet")
    try:
        files = ckpt.select_snapshot(listing, batch_id)
    except ckpt.CheckpointError as exc:
        raise CheckpointSourceError(checkpoint_location, str(exc)) from exc
    files = _without_inflight_ssts(src, files)

    try:
        offsets = ckpt.parse_offset_log(
            batch_id, src.read_bytes(f"offsets/{batch_id}").decode("utf-8", "replace"), f"offsets/{batch_id}"
        )
    except ckpt.CheckpointError as exc:
        raise CheckpointSourceError(checkpoint_location, str(exc)) from exc
    pinned = offsets.state_partitions
    if state_partitions is not None and pinned is not None and state_partitions != pinned:
        raise StatePartitionMismatchError(
            savepoint_uri,
            f"state partitions {state_partitions} asked, but the checkpoint {checkpoint_location} pins {pinned} "
            f"(offsets/{batch_id} conf spark.sql.shuffle.partitions)",
        )
    partitions = state_partitions or pinned
    if partitions is None:
        raise CheckpointSourceError(
            checkpoint_location, f"offsets/{batch_id} pins no spark.sql.shuffle.partitions and none was given"
        )
    if watermark_ms is None:
        watermark_ms = ckpt.parse_commit_log(src.read_bytes(f"commits/{batch_id}").decode("utf-8", "replace"))

    _claim_target(dst, savepoint_uri, job_namespace, job_name)
    digests = Transfer(src, dst, config, client, "savepoint").run(files)
    keep = {f.path for f in files} | {IN_PROGRESS_MARKER}
    stale = [f.path for f in dst.list() if f.path not in keep]
    if stale:
        dst.delete(stale)
    manifest = build_manifest(
        job_name=job_name,
        job_namespace=job_namespace,
        job_hash=job_hash,
        spark_version=spark_version,
        state_partitions=partitions,
        state_store_provider=offsets.state_store_provider,
        batch_id=batch_id,
        watermark_ms=watermark_ms,
        created_at=now(),
        source_checkpoint=checkpoint_location,
        files=((f.path, f.size, digests[f.path]) for f in files),
    )
    dst.write_bytes(MANIFEST_NAME, manifest.to_json(), content_type="application/json")
    dst.delete([IN_PROGRESS_MARKER])
    log.info(
        "Wrote savepoint uri=%s job=%s/%s batch_id=%d files=%d bytes=%d stale_removed=%d",
        savepoint_uri, job_namespace, job_name, batch_id, len(files), manifest.total_bytes, len(stale),
    )
    return manifest


def _claim_target(dst: Store, uri: str, job_namespace: str, job_name: str) -> None:
    """Makes ``dst`` ours before a byte is copied, or refuses (``SavepointTargetNotEmptyError``)."""
    if dst.exists(MANIFEST_NAME):
        raise SavepointTargetNotEmptyError(
            uri, f"holds a completed savepoint ({MANIFEST_NAME}): a savepoint is never overwritten; "
            "delete it first or choose another path"
        )
    marker = json.dumps({"job": f"{job_namespace}/{job_name}", "started_at": datetime.now(timezone.utc).isoformat()}).encode()
    if dst.exists(IN_PROGRESS_MARKER):
        log.warning("Rewriting incomplete savepoint uri=%s", uri)
        dst.write_bytes(IN_PROGRESS_MARKER, marker, content_type="application/json")
        return
    foreign = next(iter(dst.list()), None)
    if foreign is not None:
        raise SavepointTargetNotEmptyError(
            uri, f"holds files that are not a savepoint in progress of ours (first: {foreign.path}): "
            "refusing to write here; nothing was deleted"
        )
    if not dst.create_exclusive(IN_PROGRESS_MARKER, marker):
        raise SavepointTargetNotEmptyError(uri, "another savepoint writer claimed this target at the same moment")


def _spark_location(loc: Location) -> str:
    """The spelling Spark's Hadoop file systems accept: ``s3a://`` for S3, ``file://`` for disk."""
    return f"s3a://{loc.bucket}/{loc.path}" if loc.scheme == "s3" else f"file://{loc.path}"


def restore_savepoint(
    uri: str,
    checkpoint_location: str,
    *,
    expected_state_partitions: int,
    allow_non_restored_state: bool = False,
    spark: Any | None = None,
    drop_planned_batch: bool = False,
    s3_config: S3Config | None = None,
) -> Manifest:
    """Validates a savepoint, then materialises a fresh checkpoint from it at ``checkpoint_location``.

    Every file is verified while it is copied (the store's SHA-256 of a server-side
    copy, or a hash of the downloaded file), so each byte is read once.

    Refusals: a corrupt or incomplete savepoint (``SavepointError`` subclasses); a target
    that already holds committed batches (``RestoreTargetNotEmptyError``; progress is never
    clobbered). A target whose only commits come from an unfinished restore of the
    same savepoint (``_streamjob_restore.json`` still present) is wiped and redone;
    other uncommitted leftovers in the target (a query that never committed) are removed.
    The runtime's own ``_streamjob_*`` files in the target (its owner marker) stay, and
    none is ever copied from a savepoint.

    State partitions: when ``expected_state_partitions`` differs from the savepoint's,
    the restore uses Spark's offline state repartitioning (Spark >= 4.2,
    ``StreamingCheckpointManager.repartition``; RocksDB state): it needs ``spark``, an
    active session (the runtime's, in the driver), and a savepoint whose last logged
    batch committed. A savepoint with a planned, uncommitted batch (``planned_batch_id``)
    is refused unless ``drop_planned_batch``: dropping it lets the repartition run, at
    the price of possibly duplicating that batch's output if an exactly-once sink had
    already committed it.

    ``allow_non_restored_state``: only logged here. Which stateful operators the new
    query has is known when Spark plans its first batch, so the runtime applies the
    flag then, on every start (``job_runtime.nonrestored``): the state of operators
    the query no longer has is dropped from the checkpoint; the savepoint itself is
    never changed. A restore always copies every operator's state.
    """
    sp_loc = parse_location(uri)
    target_loc = parse_location(checkpoint_location)
    config, client = client_for(sp_loc, target_loc, s3_config=s3_config)
    source, target = Store(sp_loc, client), Store(target_loc, client)

    manifest = read_manifest(source, uri)
    repartition = expected_state_partitions != manifest.state_partitions
    if repartition:
        if spark is None:
            raise StatePartitionMismatchError(
                uri,
                f"state partitions {manifest.state_partitions} in savepoint, job asks for {expected_state_partitions}: "
                "changing them needs Spark's offline state repartition, run with a Spark session (in the driver)",
            )
        if manifest.planned_batch_id is not None and not drop_planned_batch:
            raise StatePartitionMismatchError(
                uri,
                f"state partitions {manifest.state_partitions} in savepoint, job asks for {expected_state_partitions}: "
                f"Spark repartitions only after a committed last batch, and batch {manifest.planned_batch_id} was "
                "planned but never committed; restore with the same partitions first, or allow dropping that batch",
            )
    check_listing(uri, source, manifest)

    existing = [f.path for f in target.list()]
    committed = ckpt.committed_batches(existing)
    if committed:
        marker = read_restore_marker(target)
        if marker != uri:
            raise RestoreTargetNotEmptyError(
                checkpoint_location,
                f"already holds committed batches up to {committed[-1]}: refusing to overwrite a query's progress "
                f"with savepoint {uri}; use a fresh checkpoint location",
            )
        log.warning("Resumed unfinished restore uri=%s target=%s", uri, checkpoint_location)
    leftovers = [path for path in existing if not path.startswith(ckpt.RUNTIME_FILES_PREFIX)]
    if leftovers:
        # The runtime's own files stay: the owner marker (the job restoring here claimed
        # this location first) and what recovery moved aside.
        target.delete(leftovers)
        log.info("Removed uncommitted leftovers target=%s files=%d", checkpoint_location, len(leftovers))
    target.write_bytes(RESTORE_MARKER, json.dumps({"savepoint": uri}).encode(), content_type="application/json")

    # A savepoint never holds the runtime's own markers (checkpoint.include_in_snapshot);
    # one written by hand or by an older writer must not bring another job's owner along.
    files = [f for f in manifest.files if not f.path.startswith(ckpt.RUNTIME_FILES_PREFIX)]
    if repartition and manifest.planned_batch_id is not None:
        planned = manifest.planned_batch_id
        files = [f for f in files if not _belongs_to_batch(f.path, planned)]
        log.warning("Dropped planned batch uri=%s batch_id=%d reason=state-repartition", uri, planned)
    transfer = Transfer(source, target, config, client, "restore")
    transfer.run([StoredFile(f.path, f.size) for f in files], expected={f.path: f.sha256 for f in files})

    if repartition:
        assert spark is not None
        spark_target = _spark_location(target_loc)
        spark._streamingCheckpointManager.repartition(spark_target, expected_state_partitions)
        log.info(
            "Repartitioned state target=%s from=%d to=%d",
            checkpoint_location, manifest.state_partitions, expected_state_partitions,
        )
    target.delete([RESTORE_MARKER])
    log.info(
        "Restored savepoint uri=%s target=%s batch_id=%d files=%d allow_non_restored_state=%s",
        uri, checkpoint_location, manifest.batch_id, len(files), allow_non_restored_state,
    )
    return manifest


def _belongs_to_batch(path: str, batch: int) -> bool:
    """Files a planned batch wrote before it committed that must go with it: its offsets
    entry and the state version it wrote (batch+1).

    Its source log entries stay (they are keyed by the source's log offset, not by
    batch id, and a logged entry no offsets entry uses is read by the next batch).
    """
    parts = path.split("/")
    if parts[0] == "offsets" and len(parts) == 2:
        return ckpt.batch_id_of(parts[1]) == batch
    return ckpt.state_version_of(path) == batch + 1


__all__ = [
    "DELETING_MARKER",
    "FORMAT_VERSION",
    "IN_PROGRESS_MARKER",
    "MANIFEST_NAME",
    "MULTIPART_THRESHOLD",
    "RESTORE_MARKER",
    "CheckpointSourceError",
    "JobRef",
    "Manifest",
    "ManifestFile",
    "ManifestInvalidError",
    "RestoreTargetNotEmptyError",
    "SavepointChecksumError",
    "SavepointError",
    "SavepointFileMissingError",
    "SavepointFileSizeError",
    "SavepointNotFoundError",
    "SavepointSummary",
    "SavepointTargetNotEmptyError",
    "StatePartitionMismatchError",
    "build_manifest",
    "delete_savepoint",
    "inspect_savepoint",
    "list_savepoints",
    "parse_manifest",
    "restore_savepoint",
    "unfinished_restore",
    "validate_savepoint",
    "write_savepoint",
]
