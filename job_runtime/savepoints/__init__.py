"""Savepoints in the runtime: portable, self-describing copies of a checkpoint at a committed batch.

The package's name is the savepoint API: ``write_savepoint`` (job_runtime.savepoints.write)
and ``restore_savepoint`` (job_runtime.savepoints.restore), and the readers, validator,
deleter and format of the contract package (``streamjob_contract.savepoints``,
``streamjob_contract.savepoint_manifest``, which the operator and the kubectl plugin use),
re-exported here so the runtime and its tests import one name. Also here: how bytes move
(``transfer``), where the control endpoint may write one (``target``, pure) and the
``streamjob-savepoints`` command line (``cli``). No pyspark import: only a restore that
changes the state partition count needs Spark, and receives the session from its caller.

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

from streamjob_contract.savepoint_manifest import (
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
from streamjob_contract.savepoints import (
    delete_savepoint,
    inspect_savepoint,
    list_savepoints,
    unfinished_restore,
    validate_savepoint,
)
from job_runtime.savepoints.restore import restore_savepoint
from job_runtime.savepoints.write import ManifestAttemptedError, write_savepoint

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
    "ManifestAttemptedError",
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
