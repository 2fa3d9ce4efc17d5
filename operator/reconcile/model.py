"""The values that flow through one reconcile pass: observations in, actions and events out.

Pure data. ``reconcile.observe`` builds ``Observations``; ``reconcile.decide``
reads them and returns a ``Decision``; ``k8s.act`` executes its actions. Frozen
dataclasses, so a decision can be compared in table tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Union

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RuntimeStatus, SavepointState
from streamjob_operator.api.status import StreamJobStatus


class PodPhase(str, Enum):
    pending = "Pending"
    running = "Running"
    succeeded = "Succeeded"
    failed = "Failed"
    unknown = "Unknown"


@dataclass(frozen=True)
class DriverPod:
    name: str
    phase: PodPhase
    epoch: int | None = None
    ip: str | None = None  # status.podIP: where observe polls and act calls the driver's control endpoint
    deleting: bool = False
    exit_code: int | None = None
    exit_kind: ExitCode | None = None  # what exit_code means (ExitCode.of: unknown codes are FAILED)
    message: str = ""  # termination message or log tail; never secrets (the runtime prints none)
    waiting_reason: str | None = None  # why a pending pod does not start: ErrImagePull, Unschedulable, ...
    deletion_deadline: datetime | None = None  # metadata.deletionTimestamp: when the pod should be gone
    savepoint_path: str | None = None  # the savepoint the runtime reported in its termination message
    savepoint_batch: int | None = None
    evicted_from_lost_node: bool = False  # the node controller's taint eviction (DisruptionTarget: DeletionByTaintManager)
    node: str | None = None  # spec.nodeName: where it was scheduled

    @property
    def terminated(self) -> bool:
        return self.phase in (PodPhase.succeeded, PodPhase.failed)

    @property
    def alive(self) -> bool:
        return not self.terminated and not self.deleting


@dataclass(frozen=True)
class JobProgress:
    """What the driver's control endpoint said: its ``GET /status`` body, typed by the contract
    (``streamjob_contract.runtime_status.RuntimeStatus``), or ``None`` when it did not answer.

    The body is carried whole: a field the runtime adds is declared once, in the contract, and
    shown where status or metrics show it (``api.status.JobMetrics``), never re-declared here."""

    runtime: RuntimeStatus | None = None
    # when not reachable: the first poll of this driver that went unanswered since its last answer (observe)
    unanswered_since: datetime | None = None

    @property
    def reachable(self) -> bool:
        return self.runtime is not None

    @property
    def ready(self) -> bool:
        """The query is active and has completed a batch in this run (``RuntimeStatus.ready``)."""
        return self.runtime is not None and self.runtime.ready


@dataclass(frozen=True)
class SavepointProgress:
    """The control endpoint's view of the savepoint request in ``status.operation.triggerId``."""

    state: SavepointState
    path: str | None = None
    batch_id: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class SavepointManifest:
    """A savepoint whose manifest exists in S3: it is complete (no manifest, no savepoint)."""

    path: str
    batch_id: int | None = None
    time: str | None = None
    size_bytes: int | None = None  # the sum of the files the manifest lists


@dataclass(frozen=True)
class Problem:
    """Something a pass could not read or do; it surfaces as the Degraded condition and an event."""

    reason: str  # CamelCase, e.g. S3CredentialsMissing, DriverPodRefused
    message: str


@dataclass(frozen=True)
class Observations:
    """Everything a pass knows about the world; ``None`` means "not looked at this pass"."""

    name: str
    namespace: str
    generation: int = 1
    uid: str = ""
    deleting: bool = False
    drivers: tuple[DriverPod, ...] = ()
    job: JobProgress | None = None
    savepoint: SavepointProgress | None = None
    standby: JobProgress | None = None  # the warm standby's /status (status.operation.standbyPod), while it starts
    savepoint_unknown: bool = False  # the driver answered that it has no request status.operation.triggerId
    manifest: SavepointManifest | None = None  # at status.operation.savepointPath
    checkpoint_batch: int | None = None  # latest completed batch of status.checkpointLocation
    repartition_supported: bool = False  # the runtime can restore into another state-partition count
    upgrade_slot: bool = True  # the operator's bound on concurrent upgrades has room for this job (UpgradeSlots)
    problems: tuple[Problem, ...] = ()  # what observe could not read (reported by the glue, not decided on)


# --- actions: what act() does; CreateDriver, DeleteDriver and a stopping TriggerSavepoint are disruptive


@dataclass(frozen=True)
class EnsureSupportObjects:
    """Token Secret, headless Service, and (unless the spec names one) the driver's ServiceAccount, Role, RoleBinding."""

    service_account: str | None = None


@dataclass(frozen=True)
class CreateDriver:
    """The job ConfigMap and the driver pod of one epoch; a no-op when they exist."""

    pod: str
    epoch: int
    spec_json: str
    checkpoint_location: str
    restore_from: str | None = None
    spec_hash: str = ""
    expect_committed: int | None = None  # --expect-committed: the batch a resumed checkpoint must hold
    standby: bool = False  # --standby: waits for ReleaseStandby before it touches the checkpoint
    keep_epoch: int | None = None  # a standby's: the running driver's epoch, whose ConfigMap stays
    avoid_node: str | None = None  # a node the pod should not be scheduled on if another can take it (a lost one)


@dataclass(frozen=True)
class DeleteDriver:
    pod: str
    grace_seconds: int | None = None


@dataclass(frozen=True)
class TriggerSavepoint:
    pod: str
    path: str
    stop: bool
    trigger_id: str | None = None  # the request's name, recorded in status.operation.triggerId before it is asked


@dataclass(frozen=True)
class ReleaseStandby:
    """POST /release to a warm standby: restore ``restore_from``, take the checkpoint, start the query."""

    pod: str
    restore_from: str


@dataclass(frozen=True)
class DeleteSavepoint:
    path: str


@dataclass(frozen=True)
class DeleteOwnedObjects:
    """Everything labelled for the job (also garbage-collected through owner references)."""


Action = Union[EnsureSupportObjects, CreateDriver, DeleteDriver, TriggerSavepoint, ReleaseStandby, DeleteSavepoint,
               DeleteOwnedObjects]


def is_disruptive(action: Action) -> bool:
    if isinstance(action, (CreateDriver, DeleteDriver, ReleaseStandby)):
        return True
    return isinstance(action, TriggerSavepoint) and action.stop


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    status: StreamJobStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None  # seconds until the next pass is needed; 0 = right away
    deletion_done: bool = False
    at: datetime | None = field(default=None, compare=False)
