"""StreamJob status: the typed shape of `.status`, also the write-ahead log.

Read and produced by the pure decision code (reconcile.decide) and written by
the kopf glue; the CRD generator (api.crd) turns it into the status schema.
Every list here is bounded so status never grows until etcd refuses it.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from streamjob_contract.lifecycle import LifecycleState
from streamjob_contract.model import Model
from streamjob_contract.runtime_status import RuntimeStatus, StorageStatus

from .spec import MAX_FAILURES, UpgradeMode

MAX_SAVEPOINT_HISTORY = 100  # >= spec.savepoint.retention.count's maximum, so retention alone bounds it
MAX_FAILURE_TIMES = MAX_FAILURES + 1  # FailureRate is exhausted at maxFailures + 1 failures in the window: all are kept
MAX_MESSAGE = 1024


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """A message cut to fit a status field (``MAX_MESSAGE``), marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class OpKind(StrEnum):
    """What the operation in progress does (status.operation.kind); a StrEnum, so messages and labels read its value."""

    deploy = "deploy"
    restart = "restart"
    upgrade = "upgrade"
    rollback = "rollback"
    suspend = "suspend"
    resume = "resume"
    savepoint = "savepoint"
    delete = "delete"

    @property
    def lifecycle_state(self) -> LifecycleState:
        """The job's state (status.state) while an operation of this kind runs."""
        return _STATE_OF_KIND[self]

    @property
    def progress_reason(self) -> str:
        """The Progressing and Reconciling conditions' reason while an operation of this kind runs."""
        return _PROGRESS_REASON[self]


_STATE_OF_KIND = {
    OpKind.deploy: LifecycleState.deploying,
    OpKind.restart: LifecycleState.restarting,
    OpKind.upgrade: LifecycleState.upgrading,
    OpKind.rollback: LifecycleState.rolling_back,
    OpKind.suspend: LifecycleState.suspending,
    OpKind.resume: LifecycleState.deploying,
    OpKind.savepoint: LifecycleState.running,  # a savepoint alone does not stop the job
    OpKind.delete: LifecycleState.deleting,
}

_PROGRESS_REASON = {
    OpKind.deploy: "Deploying",
    OpKind.restart: "Restarting",
    OpKind.upgrade: "Upgrading",
    OpKind.rollback: "RollingBack",
    OpKind.suspend: "Suspending",
    OpKind.resume: "Resuming",
    OpKind.savepoint: "Savepointing",
    OpKind.delete: "Deleting",
}


class Phase(StrEnum):
    """Where the operation in progress is (status.operation.phase); an operation passes through some of these in this order."""

    standby = "Standby"  # a warm standby of the target spec starts while the old driver runs (decide.standby)
    savepointing = "Savepointing"
    stopping = "Stopping"
    waiting = "Waiting"
    deploying = "Deploying"
    releasing = "Releasing"  # the standby was told to restore the savepoint and start (decide.standby)
    awaiting_ready = "AwaitingReady"
    done = "Done"  # deletion finished; kopf removes the finalizer


class Condition(Model):
    type: str = Field(description="Ready, Progressing, Degraded, Savepointing, Reconciling or Stalled.")
    status: str = Field(pattern="^(True|False|Unknown)$", description="True, False or Unknown.")
    reason: str = Field(max_length=128, description="One CamelCase word saying why.")
    message: str = Field(default="", max_length=MAX_MESSAGE, description="Human-readable detail.")
    observed_generation: int | None = Field(default=None, alias="observedGeneration", description="Generation the condition was set for.")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime", description="When status last changed (RFC 3339).")


class CheckpointInfo(Model):
    batch_id: int = Field(alias="batchId", description="Latest completed (committed) micro-batch.")
    time: str | None = Field(default=None, description="When it was observed (RFC 3339).")


class SavepointInfo(Model):
    path: str = Field(description="S3 URI of the savepoint directory.")
    batch_id: int | None = Field(default=None, alias="batchId", description="Committed batch the savepoint holds.")
    time: str | None = Field(default=None, description="When it completed (RFC 3339).")
    trigger: str = Field(default="manual", description="upgrade, suspend, manual, periodic, delete or rollback.")
    size_bytes: int | None = Field(default=None, alias="sizeBytes",
                                   description="Total bytes of the savepoint's files, from its manifest (unset when the manifest was not read).")


class StorageHygiene(Model):
    """What the driver's storage hygiene did since it started (docs/operations.md, Storage hygiene)."""

    passes: int = Field(default=0, description="Passes run; the first once the driver has committed a batch of its own.")
    pruned_run_dirs: int = Field(default=0, alias="prunedRunDirs",
                                 description="Superseded checkpoint run directories of this job deleted.")
    pruned_savepoint_dirs: int = Field(default=0, alias="prunedSavepointDirs",
                                       description="Abandoned savepoint directories of this job deleted (older than savepoint.timeoutSeconds).")
    last_pass_at: str | None = Field(default=None, alias="lastPassAt", description="When the last pass ran (RFC 3339).")
    last_error: str | None = Field(default=None, alias="lastError", max_length=MAX_MESSAGE,
                                   description="What the last pass could not delete; retried on the next pass.")

    @classmethod
    def of(cls, report: StorageStatus | None) -> StorageHygiene | None:
        """The driver's report (``StorageStatus``), its fields this type declares copied by name."""
        if report is None:
            return None
        shown = report.model_dump(include=set(cls.model_fields))
        if shown.get("last_error"):
            shown["last_error"] = clip(shown["last_error"])
        return cls(**shown)


# What status shows of the driver's GET /status (streamjob_contract.runtime_status.RuntimeStatus).
# Fields are copied by name (JobMetrics.of): a runtime field is shown by declaring it in the contract
# and here, with its description for the CRD. A unit test holds every field here to one of the
# contract's. (No docstring: it would become the schema's description and move the CRD's text.)
class JobMetrics(Model):
    query_id: str | None = Field(default=None, alias="queryId", description="Spark streaming query id (stable across restarts).")
    run_id: str | None = Field(default=None, alias="runId", description="Spark run id (new on every start).")
    last_batch_id: int | None = Field(default=None, alias="lastBatchId", description="Last batch started.")
    watermark: str | None = Field(default=None, description="Current event-time watermark.")
    input_rows_per_second: float | None = Field(default=None, alias="inputRowsPerSecond", description="Input rate.")
    processed_rows_per_second: float | None = Field(default=None, alias="processedRowsPerSecond", description="Processing rate.")
    state_rows: int | None = Field(default=None, alias="stateRows", description="Rows held in state.")
    state_memory_bytes: int | None = Field(default=None, alias="stateMemoryBytes", description="Memory used by the state store.")
    rows_dropped_by_watermark: int | None = Field(
        default=None, alias="rowsDroppedByWatermark", description="Late rows the last batch dropped (older than the watermark)."
    )
    late_rows_dropped_total: int | None = Field(
        default=None, alias="lateRowsDroppedTotal",
        description="Late rows dropped by the watermark since this driver started, over every batch it ran.",
    )
    batch_duration_ms: int | None = Field(default=None, alias="batchDurationMs", description="Duration of the last batch.")
    storage: StorageHygiene | None = Field(default=None, description="Storage hygiene of this driver: what it pruned.")
    observed_at: str | None = Field(default=None, alias="observedAt", description="When these were read from the driver.")

    @classmethod
    def of(cls, runtime: RuntimeStatus, observed_at: str) -> JobMetrics:
        """The runtime's fields this type declares, copied by name; messages clipped to ``MAX_MESSAGE``."""
        shown = runtime.model_dump(include=set(cls.model_fields) - {"storage", "observed_at"})
        return cls(**shown, storage=StorageHygiene.of(runtime.storage), observed_at=observed_at)


class Operation(Model):
    """The disruptive step in progress, recorded before it is acted on."""

    kind: OpKind = Field(description="upgrade, suspend, restart, rollback, savepoint or delete.")
    phase: Phase = Field(description="Where the operation is, e.g. Savepointing, Stopping, Deploying.")
    target_spec_hash: str | None = Field(default=None, alias="targetSpecHash", description="Hash of the spec being rolled out.")
    savepoint_path: str | None = Field(default=None, alias="savepointPath", description="Savepoint the operation writes or restores.")
    started_at: str | None = Field(default=None, alias="startedAt", description="When the operation started (RFC 3339).")
    deadline: str | None = Field(default=None, description="When the operation gives up (RFC 3339).")
    message: str = Field(default="", max_length=MAX_MESSAGE, description="Detail.")
    restore_mode: UpgradeMode | None = Field(
        default=None, alias="restoreMode",
        description="How the next driver gets its state: savepoint (restore savepointPath into a fresh checkpoint), "
        "last-state (resume the current checkpoint) or stateless (fresh checkpoint).",
    )
    trigger: str | None = Field(default=None, description="Why the savepoint is taken: upgrade, suspend, manual, periodic or delete.")
    trigger_id: str | None = Field(default=None, alias="triggerId", description="The savepoint request's name: chosen by the operator and recorded before it asks the driver (an older runtime image's own id otherwise).")
    expect_committed: int | None = Field(
        default=None, alias="expectCommitted",
        description="When the next driver resumes the current checkpoint: the batch it must find committed "
        "(status.lastCheckpoint.batchId); a checkpoint behind it is refused (CheckpointBehind).",
    )
    standby_pod: str | None = Field(
        default=None, alias="standbyPod",
        description="The warm standby of the target spec (spec.standby): started before the old driver is stopped, "
        "released with the savepoint once it is; deleted when the operation ends without releasing it.",
    )
    avoid_node: str | None = Field(
        default=None, alias="avoidNode",
        description="A restart after the driver stopped answering (driverUnreachableSeconds): the node it ran on, "
        "which the next driver pod avoids if another node can take it (a preferred node affinity). That node may "
        "still be Ready for the node controller's grace period while it is lost.",
    )
    target_spec: str | None = Field(
        default=None, alias="targetSpec",
        description="JSON of the spec this operation rolls out, as it was checked when the operation started; "
        "an edit made meanwhile is rolled out after it.",
    )


class ReconcileError(Model):
    """What the last pass could not read or do (an API or S3 error); cleared by the next pass that succeeds."""

    reason: str = Field(max_length=128, description="CamelCase, e.g. DriverPodRefused, S3CredentialsMissing, ApiError.")
    message: str = Field(default="", max_length=MAX_MESSAGE, description="What failed, with the API server's or S3's own message.")
    time: str | None = Field(default=None, description="When it was first seen (RFC 3339).")
    count: int = Field(default=1, description="Consecutive passes that failed this way.")


class BlockedChange(Model):
    """A change that was not rolled out; retried when the spec or a nonce changes."""

    spec_hash: str = Field(alias="specHash", description="Hash of the spec that was not rolled out.")
    savepoint_nonce: int = Field(default=0, alias="savepointNonce", description="spec.savepointNonce when it was blocked.")
    restart_nonce: int = Field(default=0, alias="restartNonce", description="spec.restartNonce when it was blocked.")
    reason: str = Field(description="SavepointFailed, RolledBack or StatePartitionsChangeRefused.")
    message: str = Field(default="", max_length=MAX_MESSAGE, description="Detail.")


class StreamJobStatus(Model):
    observed_generation: int | None = Field(default=None, alias="observedGeneration", description="Last spec generation acted on.")
    state: LifecycleState | None = Field(default=None, description="Lifecycle state.")
    ready: bool = Field(default=False, description="Whether the job is running and has completed a batch.")
    conditions: list[Condition] = Field(default_factory=list, max_length=8,
                                       description="Ready, Progressing, Degraded, Savepointing, Reconciling (kstatus), Stalled (kstatus).")
    driver_pod: str | None = Field(default=None, alias="driverPod", description="Name of the current driver pod.")
    restart_count: int = Field(default=0, alias="restartCount", description="Restarts after failures since the last successful start.")
    total_restarts: int = Field(default=0, alias="totalRestarts", description="Restarts after failures over the job's life.")
    failure_times: list[str] = Field(default_factory=list, alias="failureTimes", max_length=MAX_FAILURE_TIMES,
                                     description="Recent failure times, for FailureRate.")
    next_restart_at: str | None = Field(default=None, alias="nextRestartAt", description="When the pending restart happens.")
    last_checkpoint: CheckpointInfo | None = Field(default=None, alias="lastCheckpoint", description="Latest completed checkpoint.")
    last_savepoint: SavepointInfo | None = Field(default=None, alias="lastSavepoint", description="Latest completed savepoint.")
    savepoint_history: list[SavepointInfo] = Field(default_factory=list, alias="savepointHistory", max_length=MAX_SAVEPOINT_HISTORY,
                                                   description="Recent savepoints, newest first, bounded.")
    last_savepoint_nonce: int = Field(default=0, alias="lastSavepointNonce", description="savepointNonce last acted on.")
    last_restart_nonce: int = Field(default=0, alias="lastRestartNonce", description="restartNonce last acted on.")
    operation: Operation | None = Field(default=None, description="Disruptive step in progress (the write-ahead log).")
    job: JobMetrics | None = Field(default=None, description="Progress reported by the driver's control endpoint.")
    last_reconciled_spec: str | None = Field(default=None, alias="lastReconciledSpec", description="JSON of the spec last deployed.")
    last_stable_spec: str | None = Field(default=None, alias="lastStableSpec", description="JSON of the last spec that ran ready.")
    last_error: str | None = Field(default=None, alias="lastError", max_length=MAX_MESSAGE, description="Last error, e.g. the driver's.")
    driver_epoch: int = Field(default=0, alias="driverEpoch", description="Counter of drivers created; the current driver pod is <name>-driver-<epoch>.")
    checkpoint_location: str | None = Field(
        default=None, alias="checkpointLocation", description="Checkpoint location of the current state (under spec.checkpoint.location)."
    )
    restored_from: str | None = Field(
        default=None, alias="restoredFrom", description="Savepoint the current checkpoint location was seeded from (never pruned)."
    )
    deployed_at: str | None = Field(default=None, alias="deployedAt", description="When the current driver pod was created (RFC 3339).")
    last_savepoint_attempt_at: str | None = Field(
        default=None, alias="lastSavepointAttemptAt", description="When a savepoint was last triggered, for the periodic schedule."
    )
    blocked_change: BlockedChange | None = Field(
        default=None, alias="blockedChange", description="A spec change that was not rolled out and why; retried on the next spec change or nonce."
    )
    reconcile_error: ReconcileError | None = Field(
        default=None, alias="reconcileError",
        description="An API server or S3 error of the last pass; it also sets the Degraded condition and is posted as an event.",
    )
