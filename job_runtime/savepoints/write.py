"""Writing a savepoint: the consistent file set of a committed batch, copied, manifest last.

Called by the runtime in the driver (stop-with-savepoint and savepoint-while-running,
job_runtime.run.savepoint_requests) and by ``streamjob-savepoints create``
(job_runtime.savepoints.cli), through the package's name (job_runtime.savepoints).
The target is claimed with an in-progress marker before a byte is copied; a completed
savepoint or a foreign file there is refused, nothing deleted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from streamjob_contract import checkpoint as ckpt
from streamjob_contract.s3 import S3Config, Store, StoredFile, parse_location
from streamjob_contract.savepoint_manifest import (
    IN_PROGRESS_MARKER,
    MANIFEST_NAME,
    CheckpointSourceError,
    Manifest,
    SavepointError,
    SavepointTargetNotEmptyError,
    StatePartitionMismatchError,
    build_manifest,
)
from streamjob_contract.savepoints import client_for
from job_runtime import testhooks
from job_runtime.savepoints import needed
from job_runtime.savepoints.transfer import Transfer

log = logging.getLogger("job_runtime.savepoint")  # the name the log lines had before the split


ATTEMPTS = 3  # copies tried when a listed file vanished before it was read (state maintenance, log purges)


@dataclass(frozen=True)
class _Plan:
    """The files of one committed batch to copy, and what its manifest says of it."""

    batch_id: int
    files: list[StoredFile]
    offsets: ckpt.OffsetLogEntry
    watermark_ms: int | None


def _plan(src: Store, checkpoint_location: str, batch_id: int | None, watermark_ms: int | None) -> _Plan:
    """Lists the checkpoint and picks what a restore of ``batch_id`` (default: the latest committed) needs
    (checkpoint.select_snapshot, then job_runtime.savepoints.needed)."""
    listing = [f for f in src.list() if not ckpt.is_hidden(f.path)]
    if batch_id is None:
        batch_id = ckpt.latest_committed(f.path for f in listing)
        if batch_id is None:
            raise CheckpointSourceError(checkpoint_location, "no committed batch in commits/: nothing to savepoint yet")
    try:
        files = needed.restore_set(ckpt.select_snapshot(listing, batch_id), batch_id, src.read_bytes)
        offsets = ckpt.parse_offset_log(
            batch_id, src.read_bytes(f"offsets/{batch_id}").decode("utf-8", "replace"), f"offsets/{batch_id}"
        )
    except ckpt.CheckpointError as exc:
        raise CheckpointSourceError(checkpoint_location, str(exc)) from exc
    if watermark_ms is None:
        watermark_ms = ckpt.parse_commit_log(src.read_bytes(f"commits/{batch_id}").decode("utf-8", "replace"))
    return _Plan(batch_id, files, offsets, watermark_ms)


def _partitions(plan: _Plan, asked: int | None, checkpoint_location: str, savepoint_uri: str) -> int:
    """The state partitions the manifest records: the ones ``offsets/<batch>`` pins; another asked for is refused."""
    pinned = plan.offsets.state_partitions
    if asked is not None and pinned is not None and asked != pinned:
        raise StatePartitionMismatchError(
            savepoint_uri,
            f"state partitions {asked} asked, but the checkpoint {checkpoint_location} pins {pinned} "
            f"(offsets/{plan.batch_id} conf spark.sql.shuffle.partitions)",
        )
    partitions = asked or pinned
    if partitions is None:
        raise CheckpointSourceError(
            checkpoint_location, f"offsets/{plan.batch_id} pins no spark.sql.shuffle.partitions and none was given"
        )
    return partitions


def _vanished(exc: BaseException) -> bool:
    """A source file listed, then deleted before it was read (local, or S3's NoSuchKey / 404)."""
    if isinstance(exc, FileNotFoundError):
        return True
    code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
    return code in ("NoSuchKey", "404", "NotFound")


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

    claimed = False
    for attempt in range(1, ATTEMPTS + 1):
        try:
            plan = _plan(src, checkpoint_location, batch_id, watermark_ms)
            partitions = _partitions(plan, state_partitions, checkpoint_location, savepoint_uri)
            if not claimed:
                _claim_target(dst, savepoint_uri, job_namespace, job_name)
                claimed = True
            testhooks.reached("savepoint-planned")
            digests = Transfer(src, dst, config, client, "savepoint").run(plan.files)
            break
        except Exception as exc:
            if not _vanished(exc) or attempt == ATTEMPTS:
                raise
            # Spark deleted a file between the listing and its read (state maintenance, log purges):
            # a fresh listing picks what a restore needs now (the batch asked for, else the latest)
            log.warning("Listing the checkpoint again for savepoint uri=%s attempt=%d reason=a listed file vanished: %s",
                        savepoint_uri, attempt, exc)
    files, batch_id = plan.files, plan.batch_id
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
        state_store_provider=plan.offsets.state_store_provider,
        batch_id=batch_id,
        watermark_ms=plan.watermark_ms,
        created_at=now(),
        source_checkpoint=checkpoint_location,
        files=((f.path, f.size, digests[f.path]) for f in files),
    )
    body = manifest.to_json()
    try:
        testhooks.fail("savepoint-manifest-put")
        dst.write_bytes(MANIFEST_NAME, body, content_type="application/json")
        testhooks.fail("savepoint-manifest-response")
        dst.delete([IN_PROGRESS_MARKER])
    except Exception as exc:
        # The PUT may have landed even though the call raised: from here on the savepoint
        # may exist, and a caller that restarts its query would commit batches behind it.
        raise ManifestAttemptedError(savepoint_uri, manifest, _manifest_present(dst, savepoint_uri, body), exc) from exc
    log.info(
        "Wrote savepoint uri=%s job=%s/%s batch_id=%d files=%d bytes=%d stale_removed=%d",
        savepoint_uri, job_namespace, job_name, batch_id, len(files), manifest.total_bytes, len(stale),
    )
    return manifest


class ManifestAttemptedError(SavepointError):
    """The manifest PUT was attempted and something from it on raised.

    ``present`` says whether the manifest read back is the one written (the savepoint is
    complete, only its response or the marker delete failed); False when it is absent or
    could not be read. Either way the savepoint may exist: a stop-with-savepoint must not
    start its query again (job_runtime.run.savepoint_requests).
    """

    def __init__(self, uri: str, manifest: Manifest, present: bool, cause: BaseException) -> None:
        state = "is present" if present else "could not be verified"
        super().__init__(uri, f"writing {MANIFEST_NAME} raised ({cause}); the manifest {state}")
        self.manifest = manifest
        self.present = present


def _manifest_present(dst: Store, uri: str, body: bytes) -> bool:
    try:
        return dst.read_bytes(MANIFEST_NAME) == body
    except Exception as exc:  # absent, or the store is unreachable: not verified
        log.warning("Could not read back savepoint manifest uri=%s error=%s", uri, exc)
        return False


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
