"""Recovery of a checkpoint that a killed driver left behind, before Spark touches it.

Called by job_runtime.run.runner on every start, before the state-partition pin is
read and before the query starts (skipped while a restore is unfinished: the
restore redoes the whole checkpoint). Works on file:// and s3a:// through
streamjob_contract.s3.Store.

A driver can die at any instant. Spark writes every checkpoint file atomically
(a hidden temporary file renamed into place; on S3 one PUT, or a temporary
object copied into place), so a kill leaves:

- temporary files of the write in flight: ``offsets/.0.<uuid>.tmp`` and its
  ``..0.<uuid>.tmp.crc``, ``state/<op>/<p>/.<v>.changelog.<uuid>.TID<n>.tmp``, a
  ``.metadata.<uuid>.tmp``. Spark never reads them, but when the query has not
  planned a batch yet, Spark 4.3 refuses to start if ``offsets/``, ``commits/`` or
  ``state/`` lists any file at all, hidden ones included
  (``MicroBatchExecution.verifyNewCheckpointDirectory``:
  STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), so one temporary file bricks the job.
- an offset log entry without its commit: Spark re-runs that batch with the same
  offsets. Kept as is: the sink may already hold that batch's output.
- state versions of a batch that never committed: Spark overwrites them when
  it re-runs the batch. Kept as is.

And files that no kill produces but that a copy, a full disk or a foreign tool
can (a 0-byte or truncated log entry, a half-written ``metadata``), which make
Spark fail at every start ("Incomplete log file", a JSON parse error).

What this module does, decided by `plan_recovery` from a listing (pure: the
files it reads come through a callback):

- deletes temporary files, and Hadoop checksums (``.X.crc``) of files that do not exist;
- moves aside (to ``_streamjob_recovered/<time>/``, never deleted) an unreadable
  log entry that no committed batch needs: the latest ``commits/N`` (the batch
  then re-runs, as after a kill just before its commit), an ``offsets/N`` above
  the last commit (that batch never ran: Spark writes its offsets before running
  it), a ``sources/<i>/N`` above the offsets the source has used, ``metadata``
  when nothing committed;
- when no batch was ever planned, moves aside what is left in ``commits/`` and
  ``state/`` (it belongs to no batch and Spark refuses to start over it);
- refuses (CheckpointDamagedError, exit RESTORE_REFUSED) when a file that a
  committed batch needs is unreadable or missing: nothing is deleted then.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from streamjob_contract.s3 import Location, S3Config, Store, parse_location

log = logging.getLogger("job_runtime.recovery")

QUARANTINE_DIR = "_streamjob_recovered"
_VERSION_LINE = re.compile(r"^\x00?v\d+$")  # Kafka's initial-offset file starts with a 0 byte


class CheckpointDamagedError(RuntimeError):
    """A file that a committed batch needs is unreadable or missing; the message names it."""


@dataclass(frozen=True)
class Action:
    """One repair: ``delete`` a leftover, or ``move`` an unreadable file aside (kept for inspection)."""

    kind: Literal["delete", "move"]
    path: str
    size: int
    reason: str


# ---- pure: what a file is, whether a log entry can be read ------------------------------


def is_temporary(path: str) -> bool:
    """A write that never finished: Hadoop's ``.x.<uuid>.tmp`` (+ ``.crc``), Spark's ``*.TID<n>.tmp``."""
    name = path.rsplit("/", 1)[-1]
    return name.endswith((".tmp", ".tmp.crc")) or name.startswith("_temporary")


def checksum_target(path: str) -> str | None:
    """``offsets/0`` for ``offsets/.0.crc`` (Hadoop's local checksum file); None for other files."""
    head, _, name = path.rpartition("/")
    if not (name.startswith(".") and name.endswith(".crc")) or len(name) <= 5:
        return None
    target = name[1:-4]
    return f"{head}/{target}" if head else target


def _lines(data: bytes) -> list[str] | None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text.split("\n")


def _json_line(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def log_entry_problem(data: bytes, *, entries: bool) -> str | None:
    """Why a Spark metadata-log file (``offsets/N``, ``commits/N``, ``sources/<i>/N``) cannot be read.

    The format: a version line (``v1``), then JSON lines. ``entries``: every further
    line must be JSON (offsets and source logs), else only the second (commits).
    """
    if not data:
        return "empty (0 bytes)"
    lines = _lines(data)
    if lines is None:
        return "not UTF-8 text"
    if not _VERSION_LINE.match(lines[0].strip()):
        return "no version line"
    body = [line for line in lines[1:] if line.strip()]
    if not body:
        return "no entry after the version line"
    checked = body if entries else body[:1]
    for number, line in enumerate(checked, start=2):
        if line.strip() != "-" and _json_line(line) is None:
            return f"line {number} is not JSON (truncated?)"
    return None


def metadata_problem(data: bytes) -> str | None:
    """Why ``metadata`` (``{"id": "<query id>"}``) cannot be read."""
    if not data:
        return "empty (0 bytes)"
    lines = _lines(data)
    value = _json_line(lines[0]) if lines else None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        return "not a JSON object with the query id (truncated?)"
    return None


def _log_ids(paths: Iterable[str], directory: str) -> dict[int, str]:
    """Batch id -> path for the content files directly in ``directory`` (``7`` and ``9.compact``)."""
    found: dict[int, str] = {}
    for path in paths:
        head, _, name = path.rpartition("/")
        if head != directory or name.startswith("."):
            continue
        number = name.split(".", 1)[0]
        if number.isdigit() and (name == number or name == f"{number}.compact"):
            found[int(number)] = path
    return found


def _source_offsets(offsets_entry: bytes) -> list[Any]:
    """The per-source offsets of an ``offsets/N`` entry (line 3 on), as parsed JSON (None for '-')."""
    lines = _lines(offsets_entry) or []
    return [None if line.strip() == "-" else _json_line(line) for line in lines[2:] if line.strip()]


# ---- pure: the plan ---------------------------------------------------------------------


def plan_recovery(files: dict[str, int], read: Callable[[str], bytes], location: str = "") -> list[Action]:
    """The repairs that make a killed driver's checkpoint startable; raises CheckpointDamagedError.

    ``files`` maps every file under the checkpoint (hidden ones included, relative
    paths) to its size; ``read`` returns a file's bytes (only log entries are read).
    """
    actions: list[Action] = []
    alive = dict(files)

    def act(kind: Literal["delete", "move"], path: str, reason: str) -> None:
        actions.append(Action(kind, path, alive.pop(path), reason))

    def damaged(path: str, why: str) -> CheckpointDamagedError:
        return CheckpointDamagedError(
            f"checkpoint {location}: {path} {why}; a batch that committed (or may have written output) needs it, so "
            "the checkpoint cannot be repaired by removing it: restore the job from a savepoint into a fresh "
            "checkpoint location"
        )

    for path in sorted(files):
        if path.startswith(QUARANTINE_DIR + "/"):
            alive.pop(path)
        elif is_temporary(path):
            act("delete", path, "temporary file of a write that never finished")

    commits = _log_ids(alive, "commits")
    offsets = _log_ids(alive, "offsets")

    # The latest commit is what Spark reads to know where to resume; an unreadable one
    # is a batch whose completion was never durably recorded: it re-runs.
    last_commit: int | None = None
    for batch in sorted(commits, reverse=True):
        problem = log_entry_problem(read(commits[batch]), entries=False)
        if problem is None:
            last_commit = batch
            break
        if last_commit is None and batch == max(commits):
            act("move", commits[batch], f"unreadable commit log entry ({problem}); batch {batch} re-runs")
            continue
        raise damaged(commits[batch], f"is unreadable ({problem}) below the latest commit")

    if last_commit is not None and last_commit not in offsets:
        raise damaged(f"offsets/{last_commit}", f"is missing although commits/{last_commit} exists")

    # Offsets above the last commit were planned, never completed: an unreadable one
    # never ran (Spark writes it whole before running the batch).
    for batch in sorted(offsets, reverse=True):
        if last_commit is not None and batch < last_commit - 1:
            break
        problem = log_entry_problem(read(offsets[batch]), entries=True)
        if problem is None:
            continue
        if last_commit is None or batch > last_commit:
            act("move", offsets[batch], f"unreadable offset log entry ({problem}) of batch {batch}, which never ran")
            del offsets[batch]
        else:
            raise damaged(offsets[batch], f"is unreadable ({problem})")

    if "metadata" in alive:
        problem = metadata_problem(read("metadata"))
        if problem is not None:
            if last_commit is not None:
                raise damaged("metadata", f"is unreadable ({problem})")
            act("move", "metadata", f"unreadable query metadata ({problem}); nothing committed, Spark writes a new one")

    # Source logs: the newest entry of each source is read at start; one above what
    # the latest offsets entry uses was logged by a batch that was never planned.
    latest_offsets = read(offsets[max(offsets)]) if offsets else b""
    used = _source_offsets(latest_offsets)
    sources = sorted({p.split("/")[1] for p in alive if p.startswith("sources/") and p.count("/") >= 2})
    for source in sources:
        entries = _log_ids(alive, f"sources/{source}")
        offset = used[int(source)] if source.isdigit() and int(source) < len(used) else None
        log_offset = offset.get("logOffset") if isinstance(offset, dict) else None
        for batch in sorted(entries, reverse=True):
            problem = log_entry_problem(read(entries[batch]), entries=True)
            if problem is None:
                break
            if not offsets or (isinstance(log_offset, int) and batch > log_offset):
                act("move", entries[batch], f"unreadable source log entry ({problem}) that no planned batch uses")
                continue
            raise damaged(entries[batch], f"is unreadable ({problem})")

    if not offsets:
        # A query that never planned a batch: Spark refuses to start while offsets/,
        # commits/ or state/ holds any file.
        for path in sorted(alive):
            top = path.split("/", 1)[0]
            if top == "commits" and checksum_target(path) is None:
                raise damaged(path, "exists although no offset log entry does")
            if top in ("offsets", "state") and checksum_target(path) is None:
                act("move", path, "belongs to no planned batch; Spark starts a new query only over empty offsets/, commits/, state/")

    for path in sorted(alive):
        target = checksum_target(path)
        if target is not None and target not in alive:
            act("delete", path, "checksum of a file that does not exist")
    return actions


# ---- I/O ---------------------------------------------------------------------------------


def _store(location: str | Location, s3: S3Config | None) -> Store:
    loc = parse_location(location) if isinstance(location, str) else location
    client = (s3 or S3Config.from_env()).client() if loc.scheme == "s3" else None
    return Store(loc, client)


def apply_recovery(store: Store, actions: list[Action], *, job: str, now: datetime | None = None) -> None:
    """Moves aside, then deletes, as planned; logs every file and why. Safe to repeat after a kill."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    for action in actions:
        if action.kind != "move":
            continue
        target = f"{QUARANTINE_DIR}/{stamp}/{action.path}"
        store.write_bytes(target, store.read_bytes(action.path))
        log.warning(
            "moved aside unreadable checkpoint file job=%s checkpoint=%s path=%s bytes=%d to=%s reason=%s",
            job, store.location, action.path, action.size, target, action.reason,
        )
    store.delete([a.path for a in actions])
    for action in actions:
        if action.kind == "delete":
            log.info(
                "removed checkpoint leftover job=%s checkpoint=%s path=%s bytes=%d reason=%s",
                job, store.location, action.path, action.size, action.reason,
            )


def recover_checkpoint(location: str, *, job: str, s3: S3Config | None = None) -> list[Action]:
    """Lists the checkpoint, repairs what a killed driver left, returns what was done."""
    store = _store(location, s3)
    files = {f.path: f.size for f in store.list()}
    actions = plan_recovery(files, store.read_bytes, location)
    apply_recovery(store, actions, job=job)
    if actions:
        log.info(
            "recovered checkpoint job=%s checkpoint=%s removed=%d movedAside=%d",
            job, location, sum(a.kind == "delete" for a in actions), sum(a.kind == "move" for a in actions),
        )
    else:
        log.info("checked checkpoint job=%s checkpoint=%s files=%d reason=nothing to recover", job, location, len(files))
    return actions
