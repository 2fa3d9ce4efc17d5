"""Restoring a savepoint: a fresh checkpoint materialised from it, each file verified as it is copied.

Called by the runtime in the driver before the query starts (job_runtime.run.startup)
and by ``streamjob-savepoints restore`` (job_runtime.savepoints.cli), through the
package's name (job_runtime.savepoints). A changed state partition count goes through
Spark's offline state repartition, with the session the caller passes.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from streamjob_contract import checkpoint as ckpt
from streamjob_contract.s3 import Location, S3Config, Store, StoredFile, parse_location
from streamjob_contract.savepoint_manifest import RESTORE_MARKER, Manifest, RestoreTargetNotEmptyError, StatePartitionMismatchError
from streamjob_contract.savepoints import check_listing, client_for, read_manifest, read_restore_marker
from job_runtime.savepoints.transfer import Transfer

log = logging.getLogger("job_runtime.savepoint")  # the name the log lines had before the split


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
    flag then, on every start (``job_runtime.checkpoints.nonrestored``): the state of operators
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
