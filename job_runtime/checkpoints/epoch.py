"""The driver epoch: the newest driver of a checkpoint wins, an older one stops before it writes.

Called by job_runtime.run.runner (``take`` first thing on every start, before the JVM
and long before the query plans; ``Fence.fenced`` on every pass of its main loop) and
by the commit paths (job_runtime.query.fenced: every foreachBatch sink at the start and
the end of each batch; job_runtime.kafka.sink: before a transaction begins and before
it commits). Works on file:// and s3a:// through streamjob_contract.s3.Store.

Epochs are files ``<checkpoint>/_streamjob_epochs/<n>``, each created exclusively
(a hard link locally, a conditional PUT on S3): a starting driver takes the highest
listed epoch + 1, and when another driver created that one first it tries the next.
So epochs are taken in order without gaps, and a driver holding epoch n has been
replaced exactly when ``_streamjob_epochs/<n+1>`` exists; it also stops when its own
``_streamjob_epochs/<n>`` is gone (two HEADs per check). The files are
``_streamjob_*``: never in a savepoint, kept by a restore.

A fenced driver raises ``FencedError``: the runtime stops the query and exits FENCED
(streamjob_contract.exitcodes), which the operator never restarts (a newer driver
already runs). A starting driver prunes epoch files more than KEEP behind its own;
a driver that slept through KEEP restarts finds its own file gone, and stops too.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from streamjob_contract.s3 import S3Config, Store, parse_location

log = logging.getLogger("job_runtime.epoch")

EPOCH_DIR = "_streamjob_epochs"
KEEP = 20  # epoch files kept behind the newest
CHECK_SECONDS = 1.0  # the runtime's main loop checks at most this often (the sinks check every batch)
TAKE_ATTEMPTS = 50  # drivers racing for the same number: each loses at most once per rival


class FencedError(RuntimeError):
    """A newer driver took this checkpoint; this one must not write output or commits."""


def epoch_path(epoch: int) -> str:
    return f"{EPOCH_DIR}/{epoch}"


def latest_epoch(store: Store) -> int:
    """The highest epoch taken on the checkpoint, 0 when none was."""
    numbers = [int(f.path.rsplit("/", 1)[-1]) for f in store.list(EPOCH_DIR) if f.path.rsplit("/", 1)[-1].isdigit()]
    return max(numbers, default=0)


@dataclass(frozen=True)
class Fence:
    """This driver's epoch on its checkpoint; ``check`` raises FencedError once a newer driver took it."""

    location: str
    epoch: int
    store: Store
    s3: S3Config | None = field(default=None, repr=False, compare=False)  # how the store was reached

    def portable(self) -> "EpochCheck":
        """This fence as a value an executor can check (job_runtime.kafka.task_publish): no client and no
        credentials, which the executor takes from its own environment."""
        s3 = replace(self.s3, access_key_id=None, secret_access_key=None, session_token=None) if self.s3 is not None else None
        return EpochCheck(self.location, self.epoch, s3)

    def fenced(self) -> bool:
        """True when a newer driver took the checkpoint (the next epoch's file exists), or this driver's own
        epoch file is gone (pruned by a driver many starts newer, or the checkpoint was wiped under it)."""
        return self.store.exists(epoch_path(self.epoch + 1)) or not self.store.exists(epoch_path(self.epoch))

    def check(self, where: str) -> None:
        """Raises FencedError naming `where` (the write it refused) when this driver was replaced."""
        if self.fenced():
            raise FencedError(self.message(where))

    def message(self, where: str) -> str:
        return (f"checkpoint {self.location}: fenced at {where}: a newer driver took it (epoch {self.epoch} "
                f"replaced or gone, see {EPOCH_DIR}/); this driver stopped without writing further output or commits")


def take(location: str, s3: S3Config | None = None, *, job: str = "") -> Fence:
    """Takes the next epoch on `location` (exclusive create), prunes old ones; returns this driver's Fence."""
    loc = parse_location(location)
    config = s3 or S3Config.from_env()
    store = Store(loc, config.client() if loc.scheme == "s3" else None)
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    body = (json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "takenAt": stamp}) + "\n").encode()
    candidate = latest_epoch(store) + 1
    for _ in range(TAKE_ATTEMPTS):
        if store.create_exclusive(epoch_path(candidate), body):
            break
        candidate += 1
    else:
        raise FencedError(f"checkpoint {location}: could not take an epoch after {TAKE_ATTEMPTS} tries (other drivers starting)")
    log.info("took checkpoint epoch job=%s epoch=%d checkpoint=%s", job, candidate, location)
    old = [epoch_path(n) for n in range(max(1, candidate - KEEP - 50), candidate - KEEP)]
    if old:
        store.delete(old)
    return Fence(location, candidate, store, config if loc.scheme == "s3" else None)


@dataclass(frozen=True)
class EpochCheck:
    """A driver's epoch, checked from another process (an executor's task): the same two HEADs as
    ``Fence.fenced``, through a store it opens itself with its own credentials."""

    location: str
    epoch: int
    s3: S3Config | None = None  # endpoint, region, addressing: never credentials

    def fence(self) -> Fence:
        loc = parse_location(self.location)
        if loc.scheme != "s3":
            return Fence(self.location, self.epoch, Store(loc))
        known = self.s3 or S3Config()
        s3 = S3Config.from_env(endpoint_url=known.endpoint_url, region=known.region, path_style=known.path_style,
                               anonymous=known.anonymous or None)
        return Fence(self.location, self.epoch, Store(loc, s3.client()), s3)


class Throttle:
    """At most one check per `every` seconds (the runtime's main loop polls more often)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.last = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True


def replaced(fence: Fence, throttle: Throttle, *, running: bool) -> bool:
    """The runtime's main-loop check: throttled while the query runs, at once when it ended. A store that
    cannot be reached says False (logged): the sinks' own checks, and the producer's epoch, still hold."""
    if running and not throttle.due():
        return False
    try:
        return fence.fenced()
    except Exception as err:
        log.warning("could not check the checkpoint epoch checkpoint=%s epoch=%d error=%s", fence.location, fence.epoch, err)
        return False
