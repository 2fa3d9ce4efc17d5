"""Before the query starts: the checks and repairs of the checkpoint, and the restore.

Called by job_runtime.run.runner.Runner, in this order, before and around the JVM's
start: everything that can refuse the run without a JVM goes first, so a refusal is
quick. With --owner-uid the location is claimed for this StreamJob or refused when
another one owns it (job_runtime.checkpoints.ownership); then what a killed driver
left behind is repaired (job_runtime.checkpoints.recovery), unless an unfinished
restore is about to be redone.

Restore rule: with --restore-from, a checkpoint location that has no commits (or an
unfinished restore) is materialised from the savepoint; one that has commits is
resumed and the restore skipped, so a driver restarted after a restore never loses
progress. Refusals raise ``RestoreRefused`` (exit RESTORE_REFUSED) or
``JobDefinitionError`` for a location that cannot be parsed (exit INVALID_JOB).

Fence: right after the claim, this driver takes the next epoch on the checkpoint
(job_runtime.checkpoints.epoch), before recovery touches it or the query plans:
an older driver still running stops at its next check (exit FENCED).

Never fresh by accident: with --expect-committed N (the operator's
status.lastCheckpoint.batchId when it resumes a checkpoint), a checkpoint whose
latest committed batch is behind N, or that has none, is refused
(``CheckpointBehind``, exit CHECKPOINT_BEHIND), whether or not a --restore-from
would seed it: the savepoint is older than what the job committed. The operator
leaves the option out when the user acknowledged (docs/operations.md).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from job_runtime.checkpoints import epoch, janitor, ownership, recovery
from job_runtime.checkpoints.pinning import StateIncompatibleError, check_state_partitions
from job_runtime.settings import RuntimeSettings
from streamjob_contract import checkpoint
from streamjob_contract.jobdef import JobDefinitionError
from streamjob_contract.s3 import LocationError, S3Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# the Runner's logger: these lines read as they did when the Runner wrote them
log = logging.getLogger("job_runtime.runner")


class RestoreRefused(RuntimeError):
    """The savepoint or checkpoint cannot serve this job; exit RESTORE_REFUSED."""


class CheckpointBehind(RuntimeError):
    """The checkpoint's latest committed batch is behind --expect-committed; exit CHECKPOINT_BEHIND."""


def take_epoch(settings: RuntimeSettings, s3: S3Config) -> epoch.Fence:
    """This driver's epoch on the checkpoint: from now on an older driver of it stops before it writes."""
    try:
        return epoch.take(settings.checkpoint_location, s3, job=settings.job_id)
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None


def check_expected_batch(settings: RuntimeSettings, s3: S3Config, *, restoring: bool) -> None:
    """Refuses a checkpoint behind --expect-committed (wiped, emptied, another store) instead of starting fresh."""
    expected = settings.expect_committed
    if expected is None:
        return
    try:
        latest = checkpoint.latest_completed_batch(settings.checkpoint_location, s3=s3)
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None
    if latest is not None and latest >= expected:
        return
    found = "no committed batch" if latest is None else f"committed batch {latest}"
    seeded = f"; restoring savepoint {settings.restore_from} would not bring it back either" if restoring else ""
    raise CheckpointBehind(
        f"checkpoint {settings.checkpoint_location} holds {found}, behind batch {expected} the job committed "
        f"(status.lastCheckpoint.batchId){seeded}: it was wiped or points elsewhere, and starting would repeat or "
        f"lose output. Restore the checkpoint, or accept starting from it with spec.checkpoint.acceptBehindBatch: "
        f"{expected} (docs/operations.md)"
    )


def check_pin(settings: RuntimeSettings, s3: S3Config) -> None:
    """Refuses a checkpoint pinned to another state partition count (job_runtime.checkpoints.pinning)."""
    try:
        check_state_partitions(settings.checkpoint_location, settings.state_partitions, s3)
    except StateIncompatibleError as err:
        raise RestoreRefused(str(err)) from None
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None


def claim_checkpoint(settings: RuntimeSettings, s3: S3Config) -> None:
    """Refuses a checkpoint the janitor was pruning; claims it for --owner-uid or refuses another owner's."""
    try:
        janitor.refuse_pruned(checkpoint.open_store(settings.checkpoint_location, s3))
    except janitor.CheckpointPrunedError as err:
        raise RestoreRefused(str(err)) from None
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None
    uid = settings.owner_uid
    if uid is None:
        log.info("skipped checkpoint ownership check job=%s reason=no --owner-uid", settings.job_id)
        return
    try:
        ownership.claim_checkpoint(
            settings.checkpoint_location, namespace=settings.namespace, name=settings.name,
            uid=uid, s3=s3,
        )
    except ownership.CheckpointOwnedError as err:
        raise RestoreRefused(str(err)) from None
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None


def recover_checkpoint(settings: RuntimeSettings, s3: S3Config) -> None:
    """Repairs what a killed driver left (job_runtime.checkpoints.recovery), unless an unfinished restore is redone."""
    from job_runtime.savepoints import unfinished_restore

    location = settings.checkpoint_location
    try:
        restoring = unfinished_restore(location, s3_config=s3)
        if restoring is not None:
            if settings.restore_from is None:
                raise RestoreRefused(
                    f"checkpoint {location} holds an unfinished restore of savepoint {restoring}: it is incomplete "
                    f"and must not run; start with --restore-from {restoring} to finish the restore"
                )
            log.info(
                "skipped checkpoint recovery job=%s checkpoint=%s reason=unfinished restore of %s is redone",
                settings.job_id, location, restoring,
            )
            return
        recovery.recover_checkpoint(location, job=settings.job_id, s3=s3)
    except recovery.CheckpointDamagedError as err:
        raise RestoreRefused(str(err)) from None
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None


def restore_needed(settings: RuntimeSettings, s3: S3Config) -> bool:
    """True when --restore-from is set and the checkpoint has no commits (or an unfinished restore)."""
    from streamjob_contract.savepoint_manifest import RESTORE_MARKER

    uri = settings.restore_from
    if uri is None:
        return False
    location = settings.checkpoint_location
    try:
        latest = checkpoint.latest_completed_batch(location, s3=s3)
        unfinished = checkpoint.open_store(location, s3).exists(RESTORE_MARKER)
    except LocationError as err:
        raise JobDefinitionError(f"--checkpoint: {err}") from None
    if latest is not None and not unfinished:
        log.info(
            "skipped restore job=%s savepoint=%s reason=checkpoint has commits latestCompletedBatch=%d checkpoint=%s",
            settings.job_id, uri, latest, location,
        )
        return False
    return True


def check_savepoint(settings: RuntimeSettings, s3: S3Config) -> None:
    """Refuse early (before the JVM) when the savepoint has no manifest or is unreadable."""
    from job_runtime.savepoints import SavepointError, inspect_savepoint

    assert settings.restore_from is not None
    try:
        manifest = inspect_savepoint(settings.restore_from, s3_config=s3)
    except SavepointError as err:
        raise RestoreRefused(f"--restore-from {err}") from None
    except LocationError as err:
        raise JobDefinitionError(f"--restore-from: {err}") from None
    log.info(
        "found savepoint job=%s savepoint=%s batchId=%d statePartitions=%d savedBy=%s/%s",
        settings.job_id, settings.restore_from, manifest.batch_id, manifest.state_partitions,
        manifest.job.namespace, manifest.job.name,
    )


def restore(settings: RuntimeSettings, s3: S3Config, spark: SparkSession) -> None:
    """Materialises the checkpoint from --restore-from (job_runtime.savepoints.restore), or refuses."""
    from job_runtime.savepoints import SavepointError, restore_savepoint

    uri = settings.restore_from
    assert uri is not None
    location = settings.checkpoint_location
    started = time.monotonic()
    try:
        manifest = restore_savepoint(
            uri,
            location,
            expected_state_partitions=settings.state_partitions,
            allow_non_restored_state=settings.allow_non_restored_state,
            spark=spark,
            s3_config=s3,
        )
    except SavepointError as err:
        raise RestoreRefused(f"--restore-from {err}") from None
    log.info(
        "restored savepoint job=%s savepoint=%s batchId=%d checkpoint=%s seconds=%.1f",
        settings.job_id, uri, manifest.batch_id, location, time.monotonic() - started,
    )
