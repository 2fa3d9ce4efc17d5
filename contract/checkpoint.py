"""Reads a Spark Structured Streaming checkpoint without Spark: progress and a consistent file set.

Called by ``job_runtime.savepoints`` (which files make a savepoint), by the runtime's
status endpoint and by the operator (``latest_completed_batch`` to restart a failed
job from the newest committed batch, never an older one), and by the CLI.

The layout, as Spark 4.3 writes it (checked against real RocksDB and HDFS-backed queries):

- ``metadata``: the query id; written once.
- ``offsets/N``: the write-ahead log, written before batch N runs; its second line
  is JSON with ``batchWatermarkMs`` and the pinned ``conf`` (``spark.sql.shuffle.partitions``
  = state partitions, the state store provider).
- ``commits/N``: written after batch N's sink and state commits; JSON with
  ``nextBatchWatermarkMs``. Latest completed batch = highest N here.
- ``sources/<i>/<N>[.compact]``: per-source logs keyed by batch id.
- ``state/<op>/<partition>/<v>.changelog|<v>.zip|<v>.delta|<v>.snapshot``: the state of
  version v (= after batch v-1); ``<v>_<id>`` names with checkpoint format v2.
  ``SSTs/*.sst`` are immutable RocksDB files referenced by the zips;
  ``_metadata/`` and ``_stateSchema/`` describe operators and schemas.
- hidden files (``.N.crc``, ``.x.tmp``) belong to Hadoop's local file system and to
  writes in progress; they are never part of a checkpoint's content.

The pure functions here take file lists and return decisions; the two I/O functions
(``list_checkpoint``, ``latest_completed_batch``) only list and read.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamjob_contract.s3 import Location, S3Config, Store, StoredFile, parse_location

log = logging.getLogger(__name__)

_LEADING_INT = re.compile(r"^(\d+)(?:[._].*)?$")
_STATE_VERSIONED = re.compile(r"^(\d+)(?:_[^.]*)?\.(changelog|zip|delta|snapshot)$")

SHUFFLE_PARTITIONS_CONF = "spark.sql.shuffle.partitions"
RUNTIME_FILES_PREFIX = "_streamjob"  # the runtime's markers in a checkpoint location, never Spark's
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or has no committed batch to copy."""


@dataclass(frozen=True)
class OffsetLogEntry:
    """What ``offsets/N`` pins for batch N."""

    batch_id: int
    watermark_ms: int | None
    timestamp_ms: int | None
    conf: dict[str, str]

    @property
    def state_partitions(self) -> int | None:
        value = self.conf.get(SHUFFLE_PARTITIONS_CONF)
        return int(value) if value is not None and value.isdigit() else None

    @property
    def state_store_provider(self) -> str | None:
        return self.conf.get(PROVIDER_CONF)


def is_hidden(path: str) -> bool:
    """True for files that are never checkpoint content: ``.N.crc``, ``.x.tmp``, ``*.tmp``."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith(".") or name.endswith(".tmp") or name.startswith("_temporary")


def batch_id_of(name: str) -> int | None:
    """``12`` for ``12``, ``12.compact`` or ``12_abc``; ``None`` for anything else."""
    match = _LEADING_INT.match(name)
    return int(match.group(1)) if match else None


def committed_batches(paths: Iterable[str]) -> list[int]:
    """Sorted batch ids that have a ``commits/N`` file among ``paths`` (relative to the checkpoint)."""
    found = set()
    for path in paths:
        if is_hidden(path) or not path.startswith("commits/"):
            continue
        name = path[len("commits/") :]
        if "/" not in name and name.isdigit():
            found.add(int(name))
    return sorted(found)


def latest_committed(paths: Iterable[str]) -> int | None:
    batches = committed_batches(paths)
    return batches[-1] if batches else None


def state_version_of(path: str) -> int | None:
    """The state version of ``state/<op>/<partition>/<v>[_id].(changelog|zip|delta|snapshot)``, else None."""
    parts = path.split("/")
    if len(parts) != 4 or parts[0] != "state":
        return None
    match = _STATE_VERSIONED.match(parts[3])
    return int(match.group(1)) if match else None


def _state_file_included(parts: Sequence[str], max_batch: int, max_version: int) -> bool:
    # parts: ["state", op, partition-or-_metadata, ...]
    if len(parts) < 4:
        return True
    if parts[2] in ("_metadata", "_stateSchema") or parts[3] in ("_metadata", "_stateSchema"):
        # Operator metadata v2 and schema files are keyed by batch id.
        batch = batch_id_of(parts[-1])
        return batch is None or batch <= max_batch
    if len(parts) == 4:
        match = _STATE_VERSIONED.match(parts[3])
        if match:
            return int(match.group(1)) <= max_version
        return True
    # SSTs/ (and any other subdirectory of a partition): immutable, shared between versions.
    return True


def include_in_snapshot(path: str, batch_id: int) -> bool:
    """Whether ``path`` belongs to the consistent checkpoint at committed batch ``batch_id``.

    Kept: ``metadata``; ``offsets/<=N+1`` (N+1, when present, is the batch that was
    planned or in flight: a restore re-runs it with the same offsets, which keeps
    exactly-once sinks exact); ``commits/<=N``; every source log entry (they are
    keyed by the source's log offset, which is not the batch id); state versions
    ``<=N+2`` (batch N's state is version N+1; N+2 is what the planned batch N+1
    wrote, see below) with every SST file, and operator metadata. Files of later
    batches are left out, which is what makes a copy of a running query consistent.

    Why version N+2: a stop (or a kill) can come after the planned batch's sink
    committed and before its commit-log entry. The restore re-runs that batch; a
    file sink then skips it as already written, so its stateful operators do not
    run and version N+2 is never written again: without the copy, the next batch
    fails ("state/0/1/<N+2>.changelog does not exist"). When the sink had not
    committed, the re-run overwrites whatever part of N+2 was copied. The runtime's own ``_streamjob_*`` files (the owner
    marker, an unfinished restore's marker, files recovery moved aside) belong to
    the checkpoint location, not to its content, and are left out: a savepoint
    restored by another job must not carry this job's ownership. Other unknown
    files are kept: a missing file breaks a restore, an extra one does not.
    """
    if is_hidden(path):
        return False
    parts = path.split("/")
    top = parts[0]
    if top.startswith(RUNTIME_FILES_PREFIX):
        return False
    if top == "commits":
        batch = batch_id_of(parts[-1]) if len(parts) == 2 else None
        return batch is not None and batch <= batch_id
    if top == "offsets":
        batch = batch_id_of(parts[-1]) if len(parts) == 2 else None
        return batch is not None and batch <= batch_id + 1
    if top == "sources":
        # Keyed by the source's own log offset, not by batch id: after a kill the two
        # drift apart (the killed run logged files a later batch then took along), so
        # filtering by batch id dropped entries a planned batch reads ("batch 9 doesn't
        # exist" at restore). An entry ahead of the offsets is harmless: the restored
        # query reads its files in its next batch, exactly once.
        return True
    if top == "state":
        return _state_file_included(parts, batch_id + 1, batch_id + 2)
    return True


def select_snapshot(files: Iterable[StoredFile], batch_id: int) -> list[StoredFile]:
    """The consistent file set for committed batch ``batch_id`` (see ``include_in_snapshot``).

    Raises ``CheckpointError`` when ``commits/<batch_id>``, ``offsets/<batch_id>`` or
    ``metadata`` is missing.
    """
    chosen = sorted((f for f in files if include_in_snapshot(f.path, batch_id)), key=lambda f: f.path)
    present = {f.path for f in chosen}
    for required in ("metadata", f"offsets/{batch_id}", f"commits/{batch_id}"):
        if required not in present:
            raise CheckpointError(f"{required} is missing: batch {batch_id} is not a completed batch of this checkpoint")
    return chosen


def sst_files_of_snapshot(zip_bytes: bytes) -> set[str] | None:
    """Names of the SSTs/ files a RocksDB snapshot zip (``<version>.zip``) uses.

    The zip's ``metadata`` entry is ``v1`` then JSON with ``sstFiles[].dfsSstFileName``.
    Returns None when the zip cannot be read that way (then keep every SST).
    """
    import io
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
            text = archive.read("metadata").decode("utf-8")
        body = json.loads(text.split("\n", 1)[1] if text.startswith("v") else text)
        return {entry["dfsSstFileName"] for entry in body.get("sstFiles", [])}
    except (KeyError, ValueError, IndexError, zipfile.BadZipFile, TypeError):
        return None


def drop_unreferenced_ssts(files: list[StoredFile], referenced: dict[str, set[str] | None]) -> list[StoredFile]:
    """Keeps only SST files that a chosen snapshot zip of their partition names.

    ``referenced`` maps a partition directory (``state/<op>/<partition>``) to the
    SST names its chosen zips use, or None when unknown (keep all). An SST not
    referenced belongs to a newer version still being written by a running
    query, and may be incomplete: leaving it out keeps the snapshot consistent.
    """
    kept = []
    for f in files:
        head, _, name = f.path.rpartition("/SSTs/")
        if head and name.endswith(".sst"):
            names = referenced.get(head)
            if names is not None and name not in names:
                continue
        kept.append(f)
    return kept


def state_operators(paths: Iterable[str]) -> list[int]:
    """Stateful operator ids that have a ``state/<op>/`` directory."""
    ops = set()
    for path in paths:
        parts = path.split("/")
        if len(parts) > 2 and parts[0] == "state" and parts[1].isdigit() and not is_hidden(path):
            ops.add(int(parts[1]))
    return sorted(ops)


def state_partition_dirs(paths: Iterable[str]) -> dict[int, set[int]]:
    """Operator id -> partition ids that have files under ``state/<op>/<partition>/``."""
    found: dict[int, set[int]] = {}
    for path in paths:
        parts = path.split("/")
        if len(parts) > 3 and parts[0] == "state" and parts[1].isdigit() and parts[2].isdigit():
            found.setdefault(int(parts[1]), set()).add(int(parts[2]))
    return found


def parse_offset_log(batch_id: int, text: str, where: str = "") -> OffsetLogEntry:
    """Parses ``offsets/N``: a version line, the batch metadata JSON, then one line per source."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise CheckpointError(f"{where or f'offsets/{batch_id}'}: not a Spark offset log entry (expected 'v1' and metadata)")
    try:
        meta: dict[str, Any] = json.loads(lines[1])
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{where or f'offsets/{batch_id}'}: batch metadata is not JSON: {exc}") from exc
    conf = {str(k): str(v) for k, v in (meta.get("conf") or {}).items()}
    wm = meta.get("batchWatermarkMs")
    ts = meta.get("batchTimestampMs")
    return OffsetLogEntry(batch_id, int(wm) if wm is not None else None, int(ts) if ts is not None else None, conf)


def parse_commit_log(text: str) -> int | None:
    """The ``nextBatchWatermarkMs`` recorded in ``commits/N``: the watermark after batch N."""
    lines = text.splitlines()
    if len(lines) < 2:
        return None
    try:
        value = json.loads(lines[1]).get("nextBatchWatermarkMs")
    except (json.JSONDecodeError, AttributeError):
        return None
    return int(value) if value is not None else None


# ---- I/O: listing and reading only ----------------------------------------------------


def open_store(location: str | Location, s3: S3Config | None = None, client: Any | None = None) -> Store:
    loc = parse_location(location) if isinstance(location, str) else location
    if loc.scheme == "s3" and client is None:
        client = (s3 or S3Config.from_env()).client()
    return Store(loc, client)


def list_checkpoint(location: str | Location, *, s3: S3Config | None = None, client: Any | None = None) -> list[StoredFile]:
    """Every content file (hidden files left out) under a checkpoint location, with sizes."""
    store = open_store(location, s3, client)
    return [f for f in store.list() if not is_hidden(f.path)]


def latest_completed_batch(
    location: str | Location, *, s3: S3Config | None = None, client: Any | None = None
) -> int | None:
    """The highest batch id with a ``commits/N`` file, or ``None`` when nothing committed yet.

    Lists only ``commits/``, so it is cheap enough for every reconcile pass.
    """
    store = open_store(location, s3, client)
    latest = latest_committed(f"commits/{f.path.split('/', 1)[1]}" for f in store.list("commits") if "/" in f.path)
    log.debug("Read latest completed batch location=%s batch_id=%s", store.location, latest)
    return latest


def read_offset_log(
    location: str | Location, batch_id: int, *, s3: S3Config | None = None, client: Any | None = None
) -> OffsetLogEntry:
    store = open_store(location, s3, client)
    rel = f"offsets/{batch_id}"
    try:
        text = store.read_bytes(rel).decode("utf-8")
    except FileNotFoundError as exc:
        raise CheckpointError(f"{store.location.child(rel)}: offset log entry is missing") from exc
    return parse_offset_log(batch_id, text, str(store.location.child(rel)))
