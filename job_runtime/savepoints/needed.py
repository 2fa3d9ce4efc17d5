"""What a restore needs of a checkpoint's state: the versions a savepoint's batch loads, and their files.

Called by job_runtime.savepoints.write on the consistent file set of a committed batch
(``checkpoint.select_snapshot``), before a byte is copied. Pure but for ``read``, the
callable that reads a chosen RocksDB snapshot zip.

Why: a checkpoint holds every retained state version (``minBatchesToRetain``, 100 by
default), and a savepoint that copied them all took long for large state while Spark's
state maintenance deleted the oldest versions under it: the copy failed on a file that
was listed and then gone, again at every attempt. A restore of committed batch N loads
state version N+1, and the planned batch N+1 (if the savepoint carries one) writes N+2
(``checkpoint.include_in_snapshot``). Spark 4.3's state stores load version V from the
newest snapshot at or below V and the changes above it:

- RocksDB (``RocksDBFileManager``): the newest ``<s>.zip`` with s <= V, then
  ``<s+1..V>.changelog`` (changelog checkpointing); no zip: every changelog from 1.
  A zip names, in its ``metadata`` entry, the files it uses: ``sstFiles[].dfsSstFileName``
  under ``SSTs/`` and ``logFiles[].dfsLogFileName`` under ``logs/``.
- HDFS-backed: the newest ``<s>.snapshot`` with s <= V, then ``<s+1..V>.delta``.

So per state store directory this keeps: the newest snapshot at or below N+1 (the base),
snapshots above it up to N+2, changelogs and deltas above the base up to N+2, and the
SST and log files the kept zips name. Maintenance deletes only versions below the newest
snapshot it must keep for the retained versions: the base is deleted only once the query
is ``minBatchesToRetain`` batches past N, and then ``commits/N`` is purged too
(write.py then takes the savepoint again, at the latest committed batch).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from streamjob_contract.s3 import StoredFile

_VERSIONED = re.compile(r"^(\d+)(?:_[^.]*)?\.(changelog|zip|delta|snapshot)$")
SNAPSHOTS = ("zip", "snapshot")
REFERENCED_DIRS = ("SSTs", "logs")  # a RocksDB store's immutable files, named by its zips


@dataclass(frozen=True)
class StateFile:
    """A versioned file of a state store directory (``store``: the path up to the file's name)."""

    store: str
    version: int
    kind: str


def state_file(path: str) -> StateFile | None:
    """``state/<op>/<partition>[/<store>]/<v>[_id].<kind>``, else None (pure)."""
    if not path.startswith("state/"):
        return None
    store, _, name = path.rpartition("/")
    match = _VERSIONED.match(name)
    if match is None or store.count("/") < 2:
        return None
    return StateFile(store, int(match.group(1)), match.group(2))


def referenced_file(path: str) -> tuple[str, str] | None:
    """(store, name) for ``<store>/SSTs/<name>`` or ``<store>/logs/<name>`` under state/, else None (pure)."""
    if not path.startswith("state/"):
        return None
    for directory in REFERENCED_DIRS:
        store, sep, name = path.rpartition(f"/{directory}/")
        if sep and "/" not in name:
            return store, name
    return None


def keep_versions(files: list[StateFile], batch_id: int) -> set[StateFile]:
    """Pure: the versioned files a restore of committed ``batch_id`` loads (see the module docstring)."""
    loads, planned = batch_id + 1, batch_id + 2
    bases: dict[str, int] = {}
    for f in files:
        if f.kind in SNAPSHOTS and f.version <= loads:
            bases[f.store] = max(bases.get(f.store, 0), f.version)
    kept = set()
    for f in files:
        base = bases.get(f.store, 0)
        if f.version > planned:
            continue
        if (f.kind in SNAPSHOTS and f.version >= base > 0) or (f.kind not in SNAPSHOTS and f.version > base):
            kept.add(f)
    return kept


def files_of_zip(zip_bytes: bytes) -> set[str] | None:
    """Names of the SSTs/ and logs/ files a RocksDB snapshot zip uses; None when unreadable (keep all)."""
    try:
        with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
            text = archive.read("metadata").decode("utf-8")
        body = json.loads(text.split("\n", 1)[1] if text.startswith("v") else text)
        names = {str(e["dfsSstFileName"]) for e in body.get("sstFiles", [])}
        return names | {str(e["dfsLogFileName"]) for e in body.get("logFiles", [])}
    except (KeyError, ValueError, IndexError, zipfile.BadZipFile, TypeError):
        return None


def restore_set(files: list[StoredFile], batch_id: int, read: Callable[[str], bytes]) -> list[StoredFile]:
    """``files`` without the state a restore of ``batch_id`` does not load, nor the SST and log files
    no kept zip names (a newer snapshot's files may still be uploading: left out, as they must be)."""
    versioned = {f.path: sf for f in files if (sf := state_file(f.path)) is not None}
    kept = keep_versions(list(versioned.values()), batch_id)
    used: dict[str, set[str] | None] = {}
    for f in files:
        sf = versioned.get(f.path)
        if sf is not None and sf in kept and sf.kind == "zip":
            names = files_of_zip(read(f.path))
            previous = used.get(sf.store, set())
            used[sf.store] = None if names is None or previous is None else previous | names
    chosen = []
    for f in files:
        sf = versioned.get(f.path)
        if sf is not None:
            if sf in kept:
                chosen.append(f)
            continue
        ref = referenced_file(f.path)
        if ref is not None:
            store, name = ref
            names = used.get(store, set())
            if names is not None and name not in names:
                continue
        chosen.append(f)
    return chosen
