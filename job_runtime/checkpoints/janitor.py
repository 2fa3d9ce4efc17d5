"""Storage hygiene, the work: prune old checkpoint run directories and abandoned savepoint directories.

Called by job_runtime.run.runner, which starts one ``Janitor`` when the query first
starts and stops it on exit; the rules are job_runtime.checkpoints.hygiene's. A pass runs
once this driver has committed a batch of its own, then every
``--hygiene-interval-seconds``. Every pruned directory is logged with its
reason, and the totals are in the driver's ``GET /status`` (``storage``).

Safe to be killed at any instant. A run directory first gets
``_streamjob_pruning.json`` (the runtime refuses to start on a checkpoint that
holds it, see ``refuse_pruned``), then loses every file but its owner marker,
then the owner marker, then the pruning marker: a directory cut short at any
step is still this job's, and the next pass finishes it. An abandoned savepoint
directory loses every file but its in-progress marker, the marker last, so it
stays "an incomplete savepoint of ours" until it is gone; an interrupted delete
is finished by ``savepoint.delete_savepoint``, which resumes from its marker.
Files that appear while a directory is pruned (a zombie writer) keep its markers
in place, for the next pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from datetime import datetime, timezone
from typing import Any

from job_runtime.checkpoints import hygiene
from job_runtime.checkpoints.ownership import OWNER_FILE, CheckpointOwnedError, parse_owner
from streamjob_contract.s3 import Location, S3Config, Store, parse_location
from streamjob_contract.savepoint_manifest import DELETING_MARKER, IN_PROGRESS_MARKER, MANIFEST_NAME
from streamjob_contract.savepoints import delete_savepoint
from job_runtime.settings import RuntimeSettings

log = logging.getLogger("job_runtime.janitor")

FIRST_COMMIT_POLL_SECONDS = 2.0


class CheckpointPrunedError(RuntimeError):
    """The checkpoint is being pruned (it holds the pruning marker): it must never run again."""


def refuse_pruned(store: Store) -> None:
    """Raises CheckpointPrunedError when ``store`` (a checkpoint) holds the pruning marker."""
    if not store.exists(hygiene.PRUNING_MARKER):
        return
    try:
        detail = store.read_bytes(hygiene.PRUNING_MARKER).decode("utf-8", "replace").strip()
    except FileNotFoundError:  # finished meanwhile: the directory is gone or going
        detail = "(marker gone meanwhile)"
    raise CheckpointPrunedError(
        f"checkpoint {store.location} holds {hygiene.PRUNING_MARKER}: a newer run of its job superseded it and it is "
        f"being deleted, so it is incomplete and must never run again; restore from a savepoint instead ({detail})"
    )


@dataclass
class Report:
    passes: int = 0
    pruned_run_dirs: int = 0
    pruned_savepoint_dirs: int = 0
    last_pass_at: str | None = None
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "prunedRunDirs": self.pruned_run_dirs,
            "prunedSavepointDirs": self.pruned_savepoint_dirs,
            "lastPassAt": self.last_pass_at,
            "lastError": self.last_error,
        }


class Janitor:
    """One per driver: waits for the first batch this driver commits, then prunes every ``interval`` seconds."""

    def __init__(
        self,
        settings: RuntimeSettings,
        s3_config: S3Config,
        *,
        latest_completed: Callable[[], int | None],
        writing: Callable[[], list[str]],
        now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self.settings = settings
        self.s3_config = s3_config
        self._latest_completed = latest_completed
        self._writing = writing
        self._now = now
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._report = Report()
        self._thread: threading.Thread | None = None
        self._client: Any = None

    def report(self) -> dict[str, Any]:
        with self._lock:
            return self._report.to_json()

    def start(self, baseline: int | None) -> None:
        """``baseline``: the latest completed batch when the query started; pruning waits for a later one."""
        self._thread = threading.Thread(target=self._loop, args=(baseline,), name="storage-hygiene", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self, baseline: int | None) -> None:
        while True:
            try:
                latest = self._latest_completed()
            except Exception as err:  # the next poll retries
                log.debug("could not read the latest completed batch: %s", err)
                latest = None
            if latest is not None and (baseline is None or latest > baseline):
                break
            if self._stop.wait(FIRST_COMMIT_POLL_SECONDS):
                return
        log.info("storage hygiene on job=%s committedBatch=%s intervalSeconds=%g",
                 self.settings.job_id, latest, self.settings.hygiene_interval_seconds)
        while not self._stop.is_set():
            self.run_pass(latest)
            if self._stop.wait(self.settings.hygiene_interval_seconds):
                return

    def run_pass(self, committed: int | None = None) -> None:
        errors: list[str] = []
        runs = self._guarded("checkpoint run directories", lambda: self._prune_run_dirs(committed, errors), errors)
        savepoints = self._guarded("savepoint directories", lambda: self._prune_savepoint_dirs(errors), errors)
        with self._lock:
            r = self._report
            r.passes += 1
            r.pruned_run_dirs += runs
            r.pruned_savepoint_dirs += savepoints
            r.last_pass_at = self._now().isoformat(timespec="seconds").replace("+00:00", "Z")
            r.last_error = "; ".join(errors)[:1000] or None

    def _guarded(self, what: str, prune: Callable[[], int], errors: list[str]) -> int:
        """Runs one part of a pass; storage trouble never costs the job, the next pass retries."""
        if self._stop.is_set():
            return 0
        try:
            return prune()
        except Exception as err:
            log.warning("storage hygiene failed job=%s what=%s error=%s: %s", self.settings.job_id, what, type(err).__name__, err)
            errors.append(f"{what}: {type(err).__name__}: {err}")
            return 0

    # ---- stores ----------------------------------------------------------------------

    def _store(self, loc: Location) -> Store:
        if loc.scheme == "s3" and self._client is None:
            self._client = self.s3_config.client()
        return Store(loc, self._client if loc.scheme == "s3" else None)

    # ---- checkpoint run directories ----------------------------------------------------------

    def _prune_run_dirs(self, committed: int | None, errors: list[str]) -> int:
        settings = self.settings
        layout = hygiene.run_layout(settings.checkpoint_location, name=settings.name, uid=settings.owner_uid)
        if layout is None:
            log.debug("no run directories to prune job=%s checkpoint=%s reason=not <location>/<name>-<uid8>/run-<n>",
                      settings.job_id, settings.checkpoint_location)
            return 0
        owner = parse_location(layout.owner_prefix)
        older = hygiene.older_run_dirs(self._store(owner).subdirectories(), layout.run)
        pruned = 0
        for name in older:
            one = partial(self._prune_run_dir, self._store(owner.child(name)), name, layout.run, committed)
            pruned += self._guarded(f"checkpoint run directory {name}", one, errors)
        return pruned

    def _prune_run_dir(self, store: Store, name: str, current: int, committed: int | None) -> int:
        settings = self.settings
        assert settings.owner_uid is not None
        verdict = hygiene.judge_run_dir(self._run_dir_facts(name, store), current=current, uid=settings.owner_uid)
        if not verdict.prune:
            log.warning("kept checkpoint run directory job=%s dir=%s reason=%s", settings.job_id, store.location, verdict.reason)
            return 0
        files = self._delete_run_dir(store)
        if files is None:
            return 0
        log.info("pruned checkpoint run directory job=%s dir=%s files=%d reason=%s (batch %s committed in %s)",
                 settings.job_id, store.location, files, verdict.reason, committed, settings.checkpoint_location)
        return 1

    def _run_dir_facts(self, name: str, store: Store) -> hygiene.RunDirFacts:
        pruning_uid = None
        try:
            pruning_uid = hygiene.parse_pruning_marker(store.read_bytes(hygiene.PRUNING_MARKER))
        except FileNotFoundError:
            pass
        try:
            data = store.read_bytes(OWNER_FILE)
        except FileNotFoundError:
            return hygiene.RunDirFacts(name, pruning_uid=pruning_uid)
        try:
            owner = parse_owner(data, str(store.location))
        except CheckpointOwnedError:
            return hygiene.RunDirFacts(name, owner_unreadable=True, pruning_uid=pruning_uid)
        return hygiene.RunDirFacts(name, owner_uid=owner.uid, pruning_uid=pruning_uid)

    def _delete_run_dir(self, store: Store) -> int | None:
        """Marker, content, owner marker, marker; the number of files deleted, None when files kept appearing."""
        settings = self.settings
        assert settings.owner_uid is not None
        if not store.exists(hygiene.PRUNING_MARKER):
            store.write_bytes(hygiene.PRUNING_MARKER, hygiene.pruning_marker(
                job=settings.job_id, uid=settings.owner_uid, superseded_by=settings.checkpoint_location,
                now=self._now()), content_type="application/json")
        markers = (OWNER_FILE, hygiene.PRUNING_MARKER)
        content = [f.path for f in store.list() if f.path not in markers]
        store.delete(content)
        late = [f.path for f in store.list() if f.path not in markers]
        if late:
            log.warning("files appeared while pruning job=%s dir=%s files=%d first=%s; the next pass finishes it",
                        settings.job_id, store.location, len(late), late[0])
            return None
        store.delete([OWNER_FILE])
        store.delete([hygiene.PRUNING_MARKER])
        store.remove_empty_directories()
        return len(content) + 2

    # ---- savepoint directories ---------------------------------------------------------------

    def _prune_savepoint_dirs(self, errors: list[str]) -> int:
        settings = self.settings
        if not settings.savepoint_location or settings.savepoint_timeout_seconds is None:
            return 0
        base = parse_location(settings.savepoint_location)
        writing = self._writing()
        now = self._now()
        pruned = 0
        for name in self._store(base).subdirectories():
            one = partial(self._prune_savepoint_dir, self._store(base.child(name)), name, writing, now)
            pruned += self._guarded(f"savepoint directory {name}", one, errors)
        return pruned

    def _prune_savepoint_dir(self, store: Store, name: str, writing: list[str], now: datetime) -> int:
        settings = self.settings
        assert settings.savepoint_timeout_seconds is not None
        facts = self._savepoint_facts(name, store)
        busy = any(hygiene.same_place(str(store.location), path) for path in writing)
        verdict = hygiene.judge_savepoint_dir(
            facts, job=settings.job_id, timeout_seconds=settings.savepoint_timeout_seconds, now=now, writing=busy
        )
        if not verdict.prune:
            if settings.job_id in (facts.in_progress_job, facts.deleting_job):
                log.info("kept savepoint directory job=%s dir=%s reason=%s", settings.job_id, store.location, verdict.reason)
            return 0
        if facts.deleting_job is not None:
            files: int | None = delete_savepoint(str(store.location), s3_config=self.s3_config)
        else:
            files = self._delete_abandoned(store)
        if files is None:
            return 0
        log.info("pruned savepoint directory job=%s dir=%s files=%d reason=%s", settings.job_id, store.location, files, verdict.reason)
        return 1

    def _savepoint_facts(self, name: str, store: Store) -> hygiene.SavepointDirFacts:
        if store.exists(MANIFEST_NAME):  # the common case: a savepoint, decided without a listing
            return hygiene.SavepointDirFacts(name, has_manifest=True)
        job = started = deleting = None
        try:
            job, started = hygiene.parse_in_progress_marker(store.read_bytes(IN_PROGRESS_MARKER))
        except FileNotFoundError:
            pass
        try:
            deleting = hygiene.parse_deleting_marker(store.read_bytes(DELETING_MARKER))
        except FileNotFoundError:
            pass
        if job is None and deleting is None:
            return hygiene.SavepointDirFacts(name)
        files = list(store.list())
        ours = (MANIFEST_NAME, IN_PROGRESS_MARKER, DELETING_MARKER)
        nested = next((f.path for f in files if "/" in f.path and f.path.rsplit("/", 1)[-1] in ours), None)
        newest = max((f.modified for f in files if f.modified is not None), default=None)
        return hygiene.SavepointDirFacts(
            name, in_progress_job=job, in_progress_started=started, deleting_job=deleting,
            newest_write=hygiene.from_epoch(newest), nested=nested,
        )

    def _delete_abandoned(self, store: Store) -> int | None:
        """Content, then the in-progress marker; the number of files deleted, None when files kept appearing."""
        content = [f.path for f in store.list() if f.path != IN_PROGRESS_MARKER]
        store.delete(content)
        if any(f.path != IN_PROGRESS_MARKER for f in store.list()):
            log.warning("files appeared while pruning job=%s dir=%s; the next pass finishes it", self.settings.job_id, store.location)
            return None
        store.delete([IN_PROGRESS_MARKER])
        store.remove_empty_directories()
        return len(content) + 1
