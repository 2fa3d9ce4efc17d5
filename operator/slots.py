"""The operator-wide bound on concurrent upgrades (``--max-concurrent-upgrades``): who holds a slot.

A change rolled out to every job at once (a base image bumped in a shared
Kustomize base, a chart value) would otherwise stop every job with a savepoint
and start every new driver at the same moment: a savepoint storm on S3, twice
the drivers' resources with warm standbys, and every job's data stopped at once.
With a bound of N, at most N jobs run an upgrade or its rollback at a time; the
others keep running their current spec, their Progressing condition says
``UpgradeQueued``, and each starts on a later pass once a slot is free.

Who holds a slot: a job whose status records an operation of kind upgrade or
rollback. What a pass decided is known here before its status is written
(``decide_with_slot`` checks, decides and records under one lock, so two passes
on two workers cannot both take the last slot). A job this process has not
passed yet counts from the watch's copy of its status (``saw``), so an operator
restarted in the middle of a rolling upgrade does not start N more at once.
A job stuck in an upgrade keeps its slot until its operation ends (upgrades and
rollbacks have deadlines); a deleted job gives it back (``forget``). The order
in which queued jobs get a slot is the order of their passes, not of their edits.

Not covered: right after the operator starts, a job's first pass may run before the
watch delivered another job's status; an upgrade under way there is not counted yet,
so the bound can be exceeded once, until it is seen (docs/operations.md says so).

Used by ``streamjob_operator.handlers``, the only caller; pure bookkeeping, no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from streamjob_operator.api.status import OpKind, StreamJobStatus
from streamjob_operator.reconcile.decide.context import UPGRADE_QUEUED
from streamjob_operator.reconcile.model import Decision

Key = tuple[str, str]
DEFAULT_LIMIT = 10  # --max-concurrent-upgrades' default
HOLDING = frozenset({OpKind.upgrade, OpKind.rollback})


def holding(kind: object) -> bool:
    """True for the kind of an operation that holds a slot (upgrade, rollback): the one rule, for a decided status's
    ``OpKind`` and a watched body's plain string alike (``OpKind`` is a StrEnum: both match)."""
    return kind in HOLDING


def holds(status: StreamJobStatus) -> bool:
    """True when the status records an upgrade or rollback in progress."""
    op = status.operation
    return op is not None and holding(op.kind)


def waits(status: StreamJobStatus) -> bool:
    """True when the status says a changed spec waits for a slot (Progressing: UpgradeQueued)."""
    return any(c.type == "Progressing" and c.reason == UPGRADE_QUEUED for c in status.conditions)


def _body_holds(body: dict[str, Any]) -> bool:
    """``holds`` for a watched body, read raw: a status that would not parse still counts by its operation's kind."""
    op = (body.get("status") or {}).get("operation")
    return isinstance(op, dict) and holding(op.get("kind"))


class UpgradeSlots:
    """At most ``limit`` jobs hold a slot; ``limit`` 0 is no bound. Thread-safe."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held: set[Key] = set()
        self._decided: set[Key] = set()  # jobs a pass has decided for: their own decisions say, not the watch
        self._waiting: set[Key] = set()  # jobs whose last decision queued their change (for /metrics)
        self._releasing: set[Key] = set()  # held, their upgrade ended in a decision whose status is not written yet

    def saw(self, key: Key, body: dict[str, Any], deleted: bool = False) -> None:
        """A StreamJob from the watch: counts until this process has decided for it."""
        with self._lock:
            if deleted:
                self._forget(key)
            elif key not in self._decided:
                if _body_holds(body):
                    self._held.add(key)
                else:
                    self._held.discard(key)

    def forget(self, key: Key) -> None:
        """The job is gone: its slot is free."""
        with self._lock:
            self._forget(key)

    def _forget(self, key: Key) -> None:
        self._held.discard(key)
        self._decided.discard(key)
        self._waiting.discard(key)
        self._releasing.discard(key)

    def decide_with_slot(self, key: Key, decide: Callable[[bool], Decision]) -> Decision:
        """Runs ``decide(free)`` (free: the job may start an upgrade) and records whether its decision holds a slot.

        A slot is taken here, before the decision's status is written; one whose upgrade the decision ended is
        given back by ``released``, once that status is written: until then the API shows the job upgrading, and
        another job's upgrade, written first, would show one more upgrade than the bound (52 at a bound of 50 in
        the 1,000-job benchmark, before this)."""
        with self._lock:
            free = self.limit <= 0 or key in self._held or len(self._held) < self.limit
            decision = decide(free)
            self._decided.add(key)
            if holds(decision.status):
                self._held.add(key)
                self._releasing.discard(key)
            elif key in self._held:
                self._releasing.add(key)
            if waits(decision.status):
                self._waiting.add(key)
            else:
                self._waiting.discard(key)
            return decision

    def released(self, key: Key) -> None:
        """The job's last decided status is stored (written, or unchanged): a slot its upgrade ended is free."""
        with self._lock:
            if key in self._releasing:
                self._releasing.discard(key)
                self._held.discard(key)

    def in_use(self) -> int:
        with self._lock:
            return len(self._held)

    def queued(self) -> int:
        """Jobs whose change waits for a slot, as their last pass in this process decided."""
        with self._lock:
            return len(self._waiting)
