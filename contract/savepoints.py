"""Savepoints in storage, as the operator and the CLI see them: find, read, validate, delete.

Called by the operator (``inspect_savepoint`` for a savepoint's manifest, ``delete_savepoint``
to prune), by the kubectl plugin (``validate_savepoint``, ``inspect_savepoint``), and by the
runtime (``job_runtime.savepoints`` writes and restores savepoints with the helpers here;
``streamjob-savepoints`` lists and validates). No Spark here; boto3 is imported by
``streamjob_contract.s3`` only when an ``s3://`` location is used.

A savepoint is a directory: the checkpoint files at their checkpoint-relative paths
plus ``_savepoint.json``, the manifest, written last. No manifest, no savepoint.
``delete_savepoint`` deletes only what a valid manifest lists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from streamjob_contract.s3 import Location, S3Config, Store, parse_location
from streamjob_contract.savepoint_manifest import (
    CHUNK,
    DELETING_MARKER,
    IN_PROGRESS_MARKER,
    MANIFEST_NAME,
    RESTORE_MARKER,
    Manifest,
    ManifestFile,
    SavepointChecksumError,
    SavepointError,
    SavepointFileMissingError,
    SavepointFileSizeError,
    SavepointNotFoundError,
    SavepointSummary,
    StatePartitionMismatchError,
    hex_from_b64,
    parse_manifest,
)

log = logging.getLogger(__name__)


def client_for(*locations: Location, s3_config: S3Config | None) -> tuple[S3Config, Any | None]:
    config = s3_config or S3Config.from_env()
    needs = any(loc.scheme == "s3" for loc in locations)
    return config, config.client() if needs else None


def read_manifest(store: Store, uri: str) -> Manifest:
    try:
        data = store.read_bytes(MANIFEST_NAME)
    except FileNotFoundError as exc:
        raise SavepointNotFoundError(uri, f"no {MANIFEST_NAME}: not a completed savepoint") from exc
    return parse_manifest(uri, data)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_object(client: Any, bucket: str, key: str) -> str:
    digest = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in body.iter_chunks(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def stored_sha256(client: Any, bucket: str, key: str) -> tuple[int, str | None]:
    """Size and the full-object SHA-256 the store kept for an object, if it kept one."""
    head = client.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    value = head.get("ChecksumSHA256")
    full = value and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" and "-" not in value
    return int(head["ContentLength"]), hex_from_b64(value) if full else None


def inspect_savepoint(uri: str, *, s3_config: S3Config | None = None) -> Manifest:
    """The manifest of a savepoint (schema-checked; files are not checked)."""
    loc = parse_location(uri)
    _, client = client_for(loc, s3_config=s3_config)
    return read_manifest(Store(loc, client), uri)


def list_savepoints(prefix: str, *, s3_config: S3Config | None = None) -> list[SavepointSummary]:
    """Savepoints with a manifest anywhere below ``prefix``, newest first. Directories
    without a manifest (in progress or abandoned) and unreadable manifests are skipped."""
    loc = parse_location(prefix)
    _, client = client_for(loc, s3_config=s3_config)
    store = Store(loc, client)
    found: list[SavepointSummary] = []
    for f in store.list():
        if f.path != MANIFEST_NAME and not f.path.endswith("/" + MANIFEST_NAME):
            continue
        directory = f.path[: -len(MANIFEST_NAME)].rstrip("/")
        sp_loc = loc.child(directory) if directory else loc
        try:
            m = read_manifest(Store(sp_loc, client), sp_loc.uri)
        except SavepointError as exc:
            log.warning("Skipped savepoint uri=%s reason=%s", sp_loc.uri, exc.detail)
            continue
        found.append(
            SavepointSummary(
                uri=sp_loc.uri, job_name=m.job.name, job_namespace=m.job.namespace, job_hash=m.job.hash,
                batch_id=m.batch_id, created_at=m.created_at, state_partitions=m.state_partitions,
                file_count=len(m.files), total_bytes=m.total_bytes,
            )
        )
    found.sort(key=lambda s: (s.created_at, s.uri), reverse=True)
    return found


def delete_savepoint(uri: str, *, s3_config: S3Config | None = None) -> int:
    """Deletes a savepoint: the manifest first (so a half-deleted one is never taken for
    complete), then the files it lists, and nothing else. Returns how many files went.

    Refused (``SavepointNotFoundError``, ``ManifestInvalidError``) unless ``uri`` holds a
    valid manifest: a checkpoint, a prefix of savepoints or a foreign directory is never
    deleted. Nothing at all at ``uri`` (deleted already) is a no-op returning 0. A copy of the manifest (``DELETING_MARKER``) is written before the manifest
    goes, so a delete that was interrupted is finished by running it again. Files the
    manifest does not list stay, and are logged.
    """
    loc = parse_location(uri)
    _, client = client_for(loc, s3_config=s3_config)
    store = Store(loc, client)
    try:
        data = store.read_bytes(MANIFEST_NAME)
    except FileNotFoundError:
        try:
            data = store.read_bytes(DELETING_MARKER)
        except FileNotFoundError as exc:
            if next(iter(store.list()), None) is None:
                log.info("Deleted savepoint uri=%s files=0 reason=nothing there (deleted already)", uri)
                return 0
            raise SavepointNotFoundError(
                uri, f"no {MANIFEST_NAME}: not a completed savepoint, refusing to delete anything here"
            ) from exc
        log.warning("Resuming interrupted delete uri=%s", uri)
    manifest = parse_manifest(uri, data)
    store.write_bytes(DELETING_MARKER, data, content_type="application/json")
    store.delete([MANIFEST_NAME])
    listed = [f.path for f in manifest.files]
    store.delete([*listed, IN_PROGRESS_MARKER])
    store.delete([DELETING_MARKER])
    if loc.scheme == "file":
        _remove_empty_dirs(Path(loc.path))
    left = [f.path for f in store.list()]
    if left:
        log.warning("Kept files the manifest does not list uri=%s files=%d first=%s", uri, len(left), left[0])
    log.info("Deleted savepoint uri=%s files=%d", uri, len(listed) + 1)
    return len(listed) + 1


def _remove_empty_dirs(root: Path) -> None:
    """Removes the empty directories below ``root`` and ``root`` itself if empty; never a file."""
    if not root.is_dir():
        return
    for dirpath, _dirnames, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
        try:
            os.rmdir(dirpath)
        except OSError:  # not empty: something the manifest did not list
            pass


def _check_partitions(uri: str, manifest: Manifest, expected: int | None) -> None:
    if expected is not None and expected != manifest.state_partitions:
        raise StatePartitionMismatchError(
            uri, f"state partitions {manifest.state_partitions} in savepoint, job asks for {expected}"
        )


def check_listing(uri: str, store: Store, manifest: Manifest) -> dict[str, int]:
    present = {f.path: f.size for f in store.list()}
    for f in manifest.files:
        size = present.get(f.path)
        if size is None:
            raise SavepointFileMissingError(uri, f"file {f.path}: missing (manifest lists {len(manifest.files)} files)")
        if size != f.size:
            raise SavepointFileSizeError(uri, f"file {f.path}: size mismatch (manifest {f.size} bytes, found {size})")
    return present


def validate_savepoint(
    uri: str,
    expected_state_partitions: int | None = None,
    *,
    verify_checksums: bool = True,
    s3_config: S3Config | None = None,
) -> Manifest:
    """Checks the manifest (presence, schema), every file (presence, size and, unless
    ``verify_checksums`` is False, SHA-256) and the state-partition count.

    On S3 the checksum is the full-object SHA-256 the store recorded when the file was
    written with one (every file this module writes below the multipart threshold),
    read with one HEAD; otherwise the object is streamed and hashed.
    """
    loc = parse_location(uri)
    config, client = client_for(loc, s3_config=s3_config)
    store = Store(loc, client)
    manifest = read_manifest(store, uri)
    _check_partitions(uri, manifest, expected_state_partitions)
    check_listing(uri, store, manifest)
    if verify_checksums:

        def digest_of(f: ManifestFile) -> str:
            if loc.scheme == "file":
                return sha256_file(store.local_path(f.path))
            _, stored = stored_sha256(client, loc.bucket, store.key(f.path))
            return stored or sha256_object(client, loc.bucket, store.key(f.path))

        with ThreadPoolExecutor(max_workers=config.max_concurrency, thread_name_prefix="savepoint-verify") as pool:
            results = {f.path: pool.submit(digest_of, f) for f in manifest.files}
            for f in manifest.files:
                found = results[f.path].result()
                if found != f.sha256:
                    raise SavepointChecksumError(
                        uri, f"file {f.path}: checksum mismatch (manifest sha256 {f.sha256[:12]}…, found {found[:12]}…)"
                    )
    log.info("Validated savepoint uri=%s batch_id=%d files=%d checksums=%s", uri, manifest.batch_id, len(manifest.files), verify_checksums)
    return manifest


def unfinished_restore(checkpoint_location: str, *, s3_config: S3Config | None = None) -> str | None:
    """The savepoint whose restore into this checkpoint location never finished, or None."""
    loc = parse_location(checkpoint_location)
    _, client = client_for(loc, s3_config=s3_config)
    store = Store(loc, client)
    if not store.exists(RESTORE_MARKER):
        return None
    return read_restore_marker(store) or "(unreadable marker)"


def read_restore_marker(store: Store) -> str | None:
    try:
        raw = json.loads(store.read_bytes(RESTORE_MARKER))
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    value = raw.get("savepoint") if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None
