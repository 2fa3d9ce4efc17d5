"""The state of one decision pass and the vocabulary every operation shares.

Pure. ``Pass`` holds the inputs (spec, status before, observations, now) and
what the pass has decided so far (next status, actions, events, requeue);
the operation modules of this package (deploy, restart, upgrade, savepoint,
suspend, deletion, conditions) read and extend it through the small helpers
here. Built only by ``reconcile.decide.decide``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import BlockedChange, Operation, StreamJobStatus
from streamjob_operator.api.status import clip as clip  # re-exported: decide's modules clip with it

from .. import names
from ..model import (
    Action,
    CreateDriver,
    Decision,
    DeleteDriver,
    DriverPod,
    Event,
    Observations,
    PodPhase,
    ReleaseStandby,
    TriggerSavepoint,
    is_disruptive,
)
from ..policy import fmt_time, parse_time

POLL_SECONDS = 2.0  # while an operation waits on the world
UPGRADE_QUEUED = "UpgradeQueued"  # the Progressing/Reconciling reason and the event of a change waiting for a slot
FORCE_DELETE_GRACE_SECONDS = 30  # after the deletion deadline, how long force-deleted pods may linger
STUCK_TERMINATING_SECONDS = 60  # a pod still there this long after its grace period is on a lost node: force-delete it


@dataclass(frozen=True)
class Steps:
    """What one operation kind does at the points every operation passes through.

    Each operation module (deploy, restart, upgrade, suspend, savepoint, deletion)
    builds its own; ``flow`` looks them up by ``OpKind`` and hands them to the shared
    phases (``stopping``, ``rollout``), so a phase never switches on the kind.
    """

    after_stopping: Callable[[Pass], None]  # every driver is gone
    started: Callable[[Pass, DriverPod], None]  # the new driver runs
    exited_while_starting: Callable[[Pass, DriverPod], None]  # the new driver exited before it ran or was ready
    not_started: Callable[[Pass, str], None]  # the deploy deadline passed before the driver ran
    force_at_deadline: bool = False  # past op.deadline, drivers are deleted with grace 0 and the stop finishes anyway


def spec_dict(spec: StreamJobSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def spec_json(spec: StreamJobSpec) -> str:
    """The canonical JSON recorded as lastReconciledSpec / lastStableSpec."""
    return json.dumps(spec_dict(spec), sort_keys=True, separators=(",", ":"))


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def spec_hash(spec: StreamJobSpec) -> str:
    return hash_text(spec_json(spec))


class Pass:
    """One pass: the inputs, and the decision as it is built (``st`` is the next status)."""

    def __init__(self, spec: StreamJobSpec, status: StreamJobStatus, obs: Observations, now: datetime) -> None:
        self.spec = spec
        self.before = status
        self.st = status
        self.obs = obs
        self.now = now
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.requeue: float | None = None
        self.deletion_done = False
        self.savepoint_result: tuple[str, str] | None = None  # (reason, message) for the Savepointing condition
        self.failure: tuple[str, str] | None = None  # (reason, message) for Degraded when the job failed
        self.queued: str | None = None  # why a changed spec waits for an upgrade slot (Progressing, Reconciling)

    # --- building the next status ----------------------------------------------------
    def update(self, **changes: Any) -> None:
        self.st = self.st.model_copy(update=changes)

    def op(self) -> Operation:
        assert self.st.operation is not None
        return self.st.operation

    def op_update(self, **changes: Any) -> None:
        self.update(operation=self.op().model_copy(update=changes))

    def emit(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, clip(message)))

    def again(self, seconds: float) -> None:
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def t(self, delta_seconds: float = 0) -> str:
        return fmt_time(self.now + timedelta(seconds=delta_seconds))

    def past(self, when: str | None) -> bool:
        at = parse_time(when)
        return at is not None and self.now >= at

    # --- reading the observations -------------------------------------------------------
    @property
    def current(self) -> DriverPod | None:
        for pod in self.obs.drivers:
            if pod.name == self.st.driver_pod:
                return pod
        return None

    def running_driver(self) -> DriverPod | None:
        cur = self.current
        if cur is not None and cur.alive and cur.phase is PodPhase.running:
            return cur
        return None

    def reachable(self) -> bool:
        return self.obs.job is not None and self.obs.job.reachable

    def job_ready(self) -> bool:
        if self.running_driver() is None:
            return False
        if self.obs.job is None:  # not polled this pass: keep what we knew
            return self.before.ready
        return self.obs.job.reachable and self.obs.job.ready

    # --- blocked changes ---------------------------------------------------------------
    def blocked(self) -> bool:
        block = self.st.blocked_change
        return block is not None and block.spec_hash == spec_hash(self.spec)

    def block(self, reason: str, message: str, target_hash: str | None = None) -> None:
        """Records that a change was not rolled out: the current spec's, or the operation's target."""
        self.update(
            blocked_change=BlockedChange(
                spec_hash=target_hash or spec_hash(self.spec),
                savepoint_nonce=self.spec.savepoint_nonce,
                restart_nonce=self.spec.restart_nonce,
                reason=reason,
                message=clip(message),
            )
        )

    def new_savepoint_path(self, trigger: str) -> str:
        assert self.spec.savepoint is not None
        return names.savepoint_path(self.spec.savepoint.location, self.obs.name, trigger, self.now)

    # --- the result ------------------------------------------------------------------------
    def decision(self) -> Decision:
        creates = [a for a in self.actions if isinstance(a, (CreateDriver, ReleaseStandby))]
        stops = [a for a in self.actions if isinstance(a, TriggerSavepoint) and a.stop]
        deletes = [a for a in self.actions if isinstance(a, DeleteDriver)]
        if len(creates) + len(stops) > 1 or ((creates or stops) and deletes):
            raise AssertionError(f"more than one disruptive action in one pass: {[a for a in self.actions if is_disruptive(a)]}")
        return Decision(
            status=self.st,
            actions=tuple(self.actions),
            events=tuple(self.events),
            requeue_after=self.requeue,
            deletion_done=self.deletion_done,
            at=self.now,
        )
