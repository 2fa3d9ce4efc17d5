"""The savepoint format: ``_savepoint.json`` (the manifest), the marker files, and the errors.

Pure data, no I/O: ``job_runtime.savepoints`` writes, validates, restores and deletes
savepoints with these. The manifest's field names are the on-disk format.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from streamjob_contract import checkpoint as ckpt

MANIFEST_NAME = "_savepoint.json"
RESTORE_MARKER = "_streamjob_restore.json"
# Written first by a savepoint writer, removed after the manifest: "an incomplete savepoint of ours".
IN_PROGRESS_MARKER = "_streamjob_savepoint_in_progress.json"
# Written by delete_savepoint before the manifest goes (a copy of it), so an interrupted delete can resume.
DELETING_MARKER = "_streamjob_savepoint_deleting.json"
FORMAT_VERSION: Literal[1] = 1
CHUNK = 8 * 1024 * 1024
# Above this, copies and uploads are multipart: parallel parts, but no full-object SHA-256
# from the store, so the object is hashed by streaming it instead.
MULTIPART_THRESHOLD = 64 * 1024 * 1024


# ---- errors ------------------------------------------------------------------------------


class SavepointError(RuntimeError):
    """A savepoint operation was refused or failed; the message says what and where."""

    def __init__(self, uri: str, detail: str) -> None:
        super().__init__(f"{uri}: {detail}")
        self.uri = uri
        self.detail = detail


class SavepointNotFoundError(SavepointError):
    """No ``_savepoint.json``: an incomplete or foreign directory, not a savepoint."""


class ManifestInvalidError(SavepointError):
    """The manifest is not JSON, or does not follow the schema of this format version."""


class SavepointFileMissingError(SavepointError):
    pass


class SavepointFileSizeError(SavepointError):
    pass


class SavepointChecksumError(SavepointError):
    pass


class StatePartitionMismatchError(SavepointError):
    pass


class RestoreTargetNotEmptyError(SavepointError):
    """The restore target holds committed progress of some query; it is never overwritten."""


class CheckpointSourceError(SavepointError):
    """The checkpoint to copy has no committed batch, or is missing a required file."""


class SavepointTargetNotEmptyError(SavepointError):
    """The savepoint target holds a completed savepoint or files that are not ours; nothing is deleted."""


# ---- the manifest ------------------------------------------------------------------------


class ManifestFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1, description="checkpoint-relative, '/'-separated")
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class JobRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    namespace: str
    hash: str


class Manifest(BaseModel):
    """``_savepoint.json``. Field names are the on-disk format: change only with ``format_version``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[1]
    job: JobRef
    spark_version: str
    state_partitions: int = Field(ge=1)
    state_store_provider: str | None
    state_operators: list[int]
    batch_id: int = Field(ge=0, description="the last committed batch in the savepoint")
    planned_batch_id: int | None = Field(
        description="batch_id + 1 when its offsets were logged but it never committed; a restore re-runs it"
    )
    watermark_ms: int | None
    created_at: datetime
    source_checkpoint: str
    files: list[ManifestFile]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        return (self.model_dump_json(indent=2) + "\n").encode("utf-8")


@dataclass(frozen=True)
class SavepointSummary:
    uri: str
    job_name: str
    job_namespace: str
    job_hash: str
    batch_id: int
    created_at: datetime
    state_partitions: int
    file_count: int
    total_bytes: int


def build_manifest(
    *,
    job_name: str,
    job_namespace: str,
    job_hash: str,
    spark_version: str,
    state_partitions: int,
    state_store_provider: str | None,
    batch_id: int,
    watermark_ms: int | None,
    created_at: datetime,
    source_checkpoint: str,
    files: Iterable[tuple[str, int, str]],
) -> Manifest:
    """Pure: the manifest for a copied file set (path, size, sha256 hex)."""
    entries = sorted((ManifestFile(path=p, size=s, sha256=h) for p, s, h in files), key=lambda f: f.path)
    paths = [f.path for f in entries]
    planned = batch_id + 1 if f"offsets/{batch_id + 1}" in paths else None
    return Manifest(
        format_version=FORMAT_VERSION,
        job=JobRef(name=job_name, namespace=job_namespace, hash=job_hash),
        spark_version=spark_version,
        state_partitions=state_partitions,
        state_store_provider=state_store_provider,
        state_operators=ckpt.state_operators(paths),
        batch_id=batch_id,
        planned_batch_id=planned,
        watermark_ms=watermark_ms,
        created_at=created_at,
        source_checkpoint=source_checkpoint,
        files=entries,
    )


def parse_manifest(uri: str, data: bytes) -> Manifest:
    """Parses and schema-checks ``_savepoint.json``; raises ``ManifestInvalidError``."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestInvalidError(uri, f"{MANIFEST_NAME} is not JSON: {exc}") from exc
    if isinstance(raw, dict) and raw.get("format_version") not in (None, FORMAT_VERSION):
        raise ManifestInvalidError(
            uri, f"{MANIFEST_NAME}: format_version {raw.get('format_version')!r} is not supported (this reader knows {FORMAT_VERSION})"
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ManifestInvalidError(
            uri, f"{MANIFEST_NAME}: field {where}: {first['msg']} ({exc.error_count()} schema error(s))"
        ) from exc
    seen: set[str] = set()
    for f in manifest.files:
        if f.path in seen or f.path.startswith("/") or ".." in f.path.split("/") or f.path == MANIFEST_NAME:
            raise ManifestInvalidError(uri, f"{MANIFEST_NAME}: file entry {f.path!r} is duplicated or not a relative path")
        seen.add(f.path)
    for required in ("metadata", f"offsets/{manifest.batch_id}", f"commits/{manifest.batch_id}"):
        if required not in seen:
            raise ManifestInvalidError(uri, f"{MANIFEST_NAME}: lists no {required}: batch {manifest.batch_id} is not restorable")
    return manifest


# ---- moving bytes ------------------------------------------------------------------------


def hex_from_b64(value: str) -> str:
    return base64.b64decode(value).hex()


def b64_from_hex(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode()

