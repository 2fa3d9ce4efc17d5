"""How often a running job's progress is read from its driver and written to its status, at any number of jobs.

A Ready job's driver is polled (``GET /status``) and what it says (``status.job``: batch,
rates, watermark; ``status.lastCheckpoint``) used to be written to the StreamJob's status at
every poll, every 10 s: 100 status writes a second at 1,000 jobs, the API server's load
growing with the job count (docs/benchmarks/operator-scale.md). Here both have a budget,
operator-wide, so their rate stops growing past a number of jobs:

- **polls**: a Ready job with nothing pending is polled every ``poll_seconds(jobs)``: 10 s
  up to ``--driver-polls-per-second`` x 10 jobs, then ``jobs / budget`` (every 50 s at 1,000
  jobs with the default 20/s). Passes an event asks for (a driver pod changed, a spec
  change) and jobs in an operation or not Ready yet are not held to it.
- **progress writes**: a pass whose decided status differs from the stored one *only* in
  the driver's progress (``status.job``, ``status.lastCheckpoint``) and that decided no
  action and no event writes it only when the stored progress is ``progress_seconds(jobs)``
  old (10 s up to ``--progress-writes-per-second`` x 10 jobs, then ``jobs / budget``). Every
  other change (state, readiness, a condition, an error, an operation) is written at once,
  with the latest progress.

Between two progress writes the newest progress is kept here, in memory, and overlaid on
the stored status that the next pass reads (``overlay``): decide always sees the latest
batch the operator has seen (``lineage`` and the expected batch of a restart read
``lastCheckpoint``), and the next write carries it. An operator that restarts loses at most
one interval of progress it had not written, as if its writes had been slower; the driver's
checkpoint, not status, is what a restart resumes from.

Used by ``streamjob_operator.handlers``; bookkeeping only, no I/O.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.reconcile.model import Decision
from streamjob_operator.reconcile.policy import JOB_POLL_SECONDS, parse_time

Key = tuple[str, str]
DEFAULT_POLLS_PER_SECOND = 20.0  # --driver-polls-per-second
DEFAULT_WRITES_PER_SECOND = 10.0  # --progress-writes-per-second
PROGRESS_FIELDS = ("job", "last_checkpoint")


def interval(jobs: int, per_second: float) -> float:
    """Seconds between two of a job's polls or progress writes, when ``jobs`` jobs share ``per_second``."""
    return max(JOB_POLL_SECONDS, jobs / per_second)


def progress_only(stored: StreamJobStatus, decided: StreamJobStatus) -> bool:
    """True when ``decided`` differs from ``stored`` in the driver's progress and nothing else."""
    return decided.model_copy(update={f: getattr(stored, f) for f in PROGRESS_FIELDS}) == stored


@dataclass(frozen=True)
class _Unwritten:
    driver_pod: str | None
    base_observed_at: str | None  # the stored progress this was decided over
    status: StreamJobStatus  # the decided status whose progress is not written yet


class Progress:
    """The operator-wide budgets and each job's progress not yet written; thread-safe."""

    def __init__(self, polls_per_second: float = DEFAULT_POLLS_PER_SECOND,
                 writes_per_second: float = DEFAULT_WRITES_PER_SECOND) -> None:
        if polls_per_second <= 0 or writes_per_second <= 0:
            raise ValueError("budgets must be > 0")
        self.polls_per_second = polls_per_second
        self.writes_per_second = writes_per_second
        self._lock = threading.Lock()
        self._jobs: set[Key] = set()
        self._unwritten: dict[Key, _Unwritten] = {}

    # --- the job count, and the timer's list of jobs -----------------------------------------
    # Not the read cache's StreamJobs (k8s.cache), though the same watch events feed both: the cache keeps a body
    # only when its resourceVersion is an integer (else it answers nothing and the pass makes the request), so a
    # job could be missing there, and would get no timer pass and not count in the budgets.
    def saw(self, key: Key, deleted: bool = False) -> None:
        with self._lock:
            if deleted:
                self._jobs.discard(key)
                self._unwritten.pop(key, None)
            else:
                self._jobs.add(key)

    def known(self) -> list[Key]:
        """Every job the watch has delivered and not deleted (the timer's list)."""
        with self._lock:
            return list(self._jobs)

    def jobs(self) -> int:
        with self._lock:
            return max(1, len(self._jobs))

    def poll_seconds(self) -> float:
        return interval(self.jobs(), self.polls_per_second)

    def progress_seconds(self) -> float:
        return max(self.poll_seconds(), interval(self.jobs(), self.writes_per_second))

    # --- progress not written yet ----------------------------------------------------------
    def overlay(self, key: Key, stored: StreamJobStatus) -> StreamJobStatus:
        """``stored`` with the newer progress this process decided and has not written, if it still applies: same
        driver, and nobody wrote progress since (else it is dropped)."""
        with self._lock:
            kept = self._unwritten.get(key)
            if kept is None:
                return stored
            if kept.driver_pod != stored.driver_pod or kept.base_observed_at != _observed_at(stored):
                del self._unwritten[key]
                return stored
        return stored.model_copy(update={f: getattr(kept.status, f) for f in PROGRESS_FIELDS})

    def defer(self, key: Key, stored: StreamJobStatus, decision: Decision, now: datetime) -> bool:
        """True (and the decided progress kept here) when the decision may skip its status write: it changes only
        progress, acts on nothing, tells nothing, and the stored progress is younger than ``progress_seconds``."""
        if decision.actions or decision.events or not progress_only(stored, decision.status):
            return False
        seen = parse_time(_observed_at(stored))
        if seen is None or stored.last_checkpoint is None or (now - seen).total_seconds() >= self.progress_seconds():
            return False
        with self._lock:
            self._unwritten[key] = _Unwritten(stored.driver_pod, _observed_at(stored), decision.status)
        return True

    def written(self, key: Key) -> None:
        """The job's status was written: with the latest progress, which is no longer only here."""
        with self._lock:
            self._unwritten.pop(key, None)

    def forget(self, key: Key) -> None:
        self.saw(key, deleted=True)


def _observed_at(status: StreamJobStatus) -> str | None:
    return status.job.observed_at if status.job is not None else None
