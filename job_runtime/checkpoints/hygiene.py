"""Storage hygiene, the rules: which checkpoint run directories and savepoint directories may go.

Pure: facts in, verdicts out, no I/O. ``job_runtime.checkpoints.janitor`` gathers the facts
from the store, asks these functions, and deletes what they allow. The rules
(docs/operations.md, "Storage hygiene"):

Checkpoint run directories. The operator gives every seeded state a directory of
its own, ``<checkpoint.location>/<name>-<uid[:8]>/run-<epoch>`` (first deploy,
savepoint restore, stateless upgrade); restarts, last-state upgrades and
rollbacks resume the directory in ``status.checkpointLocation``, and the
operator never goes back to an older one (a rollback restores its savepoint or
starts stateless; savepoints are copies and need no checkpoint once complete).
So the driver of ``run-N`` prunes a sibling ``run-M`` when

- its own checkpoint has the operator's layout: its parent directory is exactly
  ``<name>-<uid[:8]>`` of this job (``--name``, ``--owner-uid``), so nothing
  outside this job's own prefix is ever looked at;
- ``M < N`` (strictly older: never the current directory, never a newer one);
- this driver has committed a batch of its own in ``run-N`` (the caller checks),
  so the current directory can restart the job: a restore is finished then,
  and a restart resumes ``run-N``;
- ``run-M`` is provably this job's: its ``_streamjob_owner.json`` names this
  uid, or our ``_streamjob_pruning.json`` is there (a prune that was cut short).
  Anything else (no marker, an unreadable one, another uid) is kept and logged.

Savepoint directories. Directly under the job's savepoint location, a directory
holding ``_savepoint.json`` (the manifest) is a savepoint: retention's business,
always kept. One with no manifest is pruned when it is provably an abandoned
one of this job's:

- it holds the in-progress marker of a savepoint writer naming this job
  (``namespace/name``), or the deleting marker of an interrupted delete whose
  manifest copy names this job; a directory with neither is not ours (kept);
- it is not a savepoint this driver is writing;
- nothing in it was written for longer than the savepoint timeout
  (``spec.savepoint.timeoutSeconds``), counting the marker's start time and the
  newest file: by then the operator has declared that savepoint failed, and a
  writer that is still copying keeps adding files;
- it holds no other savepoint (no manifest or marker deeper down).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from streamjob_contract.s3 import Location, LocationError, parse_location

PRUNING_MARKER = "_streamjob_pruning.json"  # written into a run directory before anything in it is deleted
RUN_DIR = re.compile(r"^run-(0|[1-9][0-9]{0,17})$")


@dataclass(frozen=True)
class Verdict:
    """What to do with one directory (its name under the listed prefix) and why."""

    name: str
    prune: bool
    reason: str


# ---- checkpoint run directories ------------------------------------------------------------


@dataclass(frozen=True)
class RunLayout:
    """Where this driver's checkpoint sits in the operator's layout: the job's own prefix and N of run-N."""

    owner_prefix: str  # URI of <checkpoint.location>/<name>-<uid[:8]>
    run: int


def owner_dir_name(name: str, uid: str) -> str:
    """The job's own directory under spec.checkpoint.location (streamjob_operator.reconcile.names)."""
    return f"{name}-{uid[:8]}"


def run_layout(checkpoint: str, *, name: str, uid: str | None) -> RunLayout | None:
    """The layout when ``checkpoint`` is ``<base>/<name>-<uid[:8]>/run-<N>`` of this job; None otherwise."""
    if not uid:
        return None
    try:
        loc = parse_location(checkpoint)
    except LocationError:
        return None
    parts = loc.path.rstrip("/").split("/")
    if len(parts) < 2 or parts[-2] != owner_dir_name(name, uid):
        return None
    match = RUN_DIR.match(parts[-1])
    if match is None:
        return None
    uri = loc.uri.rstrip("/")
    return RunLayout(owner_prefix=uri[: -len(parts[-1]) - 1], run=int(match.group(1)))


@dataclass(frozen=True)
class RunDirFacts:
    """What a sibling directory's markers say (read only for names ``run-M`` with M below the current N)."""

    name: str
    owner_uid: str | None = None  # from _streamjob_owner.json; None when absent
    owner_unreadable: bool = False
    pruning_uid: str | None = None  # from _streamjob_pruning.json; None when absent


def run_number(name: str) -> int | None:
    match = RUN_DIR.match(name)
    return int(match.group(1)) if match else None


def older_run_dirs(names: Iterable[str], current: int) -> list[str]:
    """The names ``run-M`` with ``M < current``, oldest first: the only ones whose markers are read."""
    older = [(n, m) for n in names if (m := run_number(n)) is not None and m < current]
    return [n for n, _ in sorted(older, key=lambda t: t[1])]


def judge_run_dir(facts: RunDirFacts, *, current: int, uid: str) -> Verdict:
    number = run_number(facts.name)
    if number is None:
        return Verdict(facts.name, False, "not a run-<n> directory")
    if number >= current:
        return Verdict(facts.name, False, f"not older than the current run-{current}")
    if facts.pruning_uid is not None:
        if facts.pruning_uid == uid:
            return Verdict(facts.name, True, f"finishing an interrupted prune ({PRUNING_MARKER} of this job)")
        return Verdict(facts.name, False, f"{PRUNING_MARKER} names another job (uid {facts.pruning_uid})")
    if facts.owner_unreadable:
        return Verdict(facts.name, False, "owner marker unreadable: ownership unknown")
    if facts.owner_uid is None:
        return Verdict(facts.name, False, "no owner marker: not provably this job's")
    if facts.owner_uid != uid:
        return Verdict(facts.name, False, f"owned by another job (uid {facts.owner_uid})")
    return Verdict(facts.name, True, f"superseded by run-{current}, which has committed a batch of its own")


def pruning_marker(*, job: str, uid: str, superseded_by: str, now: datetime) -> bytes:
    body = {"job": job, "uid": uid, "supersededBy": superseded_by, "startedAt": _stamp(now)}
    return (json.dumps(body, indent=2) + "\n").encode()


def parse_pruning_marker(data: bytes) -> str:
    """The uid a pruning marker names ("" when unreadable: then it matches no job)."""
    try:
        return str(json.loads(data)["uid"])
    except (ValueError, KeyError, TypeError):
        return ""


# ---- savepoint directories -------------------------------------------------------------------


@dataclass(frozen=True)
class SavepointDirFacts:
    """What one directory directly under the savepoint location holds (markers parsed)."""

    name: str
    has_manifest: bool = False
    in_progress_job: str | None = None  # "namespace/name" of the in-progress marker; None when absent
    in_progress_started: datetime | None = None
    deleting_job: str | None = None  # the job in the deleting marker's manifest copy; None when absent
    newest_write: datetime | None = None  # the newest file in it
    nested: str | None = None  # a manifest or marker deeper down: another savepoint inside


def judge_savepoint_dir(
    facts: SavepointDirFacts, *, job: str, timeout_seconds: float, now: datetime, writing: bool = False
) -> Verdict:
    """``writing``: this driver is writing a savepoint at that directory right now."""
    if facts.has_manifest:
        return Verdict(facts.name, False, "complete savepoint (manifest): retention decides")
    if facts.in_progress_job is None and facts.deleting_job is None:
        return Verdict(facts.name, False, "no savepoint marker: not a savepoint of ours")
    owner = facts.in_progress_job if facts.in_progress_job is not None else facts.deleting_job
    if owner != job:
        return Verdict(facts.name, False, f"a savepoint of another job ({owner})")
    if writing:
        return Verdict(facts.name, False, "this driver is writing it")
    if facts.nested is not None:
        return Verdict(facts.name, False, f"holds another savepoint's file {facts.nested}")
    times = [t for t in (facts.in_progress_started, facts.newest_write) if t is not None]
    if not times:
        return Verdict(facts.name, False, "no time to judge its age by")
    age = (now - max(times)).total_seconds()
    if age <= timeout_seconds:
        return Verdict(facts.name, False, f"in progress: last written {age:.0f}s ago, timeout {timeout_seconds:g}s")
    what = "abandoned savepoint" if facts.in_progress_job is not None else "interrupted savepoint delete"
    return Verdict(facts.name, True, f"{what}: nothing written for {age:.0f}s, more than the timeout {timeout_seconds:g}s")


def parse_in_progress_marker(data: bytes) -> tuple[str, datetime | None]:
    """(job, started_at) of a savepoint writer's marker; job "" when unreadable (then it matches no job)."""
    try:
        raw = json.loads(data)
        job = str(raw["job"])
    except (ValueError, KeyError, TypeError):
        return "", None
    try:
        started = datetime.fromisoformat(str(raw.get("started_at", "")).replace("Z", "+00:00"))
    except ValueError:
        return job, None
    return job, started if started.tzinfo else started.replace(tzinfo=timezone.utc)


def parse_deleting_marker(data: bytes) -> str:
    """The job a deleting marker (a copy of the manifest) names; "" when unreadable."""
    try:
        ref = json.loads(data)["job"]
        return f"{ref['namespace']}/{ref['name']}"
    except (ValueError, KeyError, TypeError):
        return ""


def same_place(a: str, b: str) -> bool:
    """Whether two URIs name the same place (s3:// and s3a:// are one store)."""
    try:
        x, y = parse_location(a), parse_location(b)
    except LocationError:
        return False
    return _key(x) == _key(y)


def _key(loc: Location) -> tuple[str, str, str]:
    return (loc.scheme, loc.bucket, loc.path.rstrip("/"))


def from_epoch(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, timezone.utc) if seconds is not None else None


def _stamp(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
