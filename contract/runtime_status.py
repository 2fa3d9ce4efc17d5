"""What the driver's control endpoint says: the runtime's states and its status payloads, typed.

Written by the runtime (``job_runtime.run.runner`` builds ``RuntimeStatus`` for ``GET /status``,
``job_runtime.run.savepoint_requests`` a ``SavepointStatus`` per savepoint request) and read by the
operator (``streamjob_operator.reconcile.observe``). Field names on the wire are camelCase.
A reader ignores fields it does not know, so a newer runtime can add one without breaking an
older operator; every field may be absent (``None``) for the same reason.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel


class RunState(str, Enum):
    """Lifecycle of the runtime, as /status and /healthz report it."""

    STARTING = "STARTING"
    STANDBY = "STANDBY"  # --standby: session up, job loaded and checked; waits for POST /release, touching no checkpoint
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    SAVEPOINTING = "SAVEPOINTING"  # stop-with-savepoint: query stopped, savepoint being written
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FINISHED = "FINISHED"
    FAILED = "FAILED"


class SavepointState(str, Enum):
    """Where one savepoint request stands (``GET /savepoints/<id>``, the termination message)."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


def watermark_ms(value: str | None) -> int | None:
    """Spark's ISO-8601 watermark ('1970-01-01T00:00:15.000Z') as epoch milliseconds."""
    if not value:
        return None
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


class Payload(BaseModel):
    """Base of the endpoint's bodies: camelCase on the wire, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    def to_json(self) -> dict[str, Any]:
        """The body as the endpoint sends it: camelCase keys, every field present."""
        return self.model_dump(by_alias=True, mode="json")

    @classmethod
    def checked(cls, body: dict[str, Any]) -> dict[str, Any]:
        """A writer's body as sent, checked against the type: a key it does not declare is an
        error (a reader would drop it), so a new field cannot skip the contract."""
        declared = {info.alias or name for name, info in cls.model_fields.items()}
        unknown = sorted(set(body) - declared)
        if unknown:
            raise ValueError(f"{cls.__name__} does not declare {unknown}: add them to streamjob_contract.runtime_status")
        return cls.model_validate(body).to_json()


class SavepointStatus(Payload):
    """One savepoint request: ``GET /savepoints/<id>``, ``savepointInProgress``, ``lastSavepoint``."""

    id: str | None = None
    state: SavepointState
    path: str | None = None
    stop: bool = False
    batch_id: int | None = None
    error: str | None = None
    requested_at: str | None = None
    finished_at: str | None = None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class StorageStatus(Payload):
    """The driver's storage hygiene since it started (``job_runtime.checkpoints.janitor``)."""

    passes: int = 0
    pruned_run_dirs: int = 0
    pruned_savepoint_dirs: int = 0
    last_pass_at: str | None = None
    last_error: str | None = None

    @field_validator("passes", "pruned_run_dirs", "pruned_savepoint_dirs", mode="before")
    @classmethod
    def _counts(cls, value: Any) -> int:
        return _count(value)  # a count that is not one is no count: the report is advisory

    @field_validator("last_pass_at", "last_error", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str | None:
        return value if isinstance(value, str) else None


class RuntimeStatus(Payload):
    """``GET /status``: the query, its last progress report, the restore, savepoints and storage."""

    job: str | None = None
    state: RunState | None = None
    query_id: str | None = None
    run_id: str | None = None
    query_starts: int | None = None
    latest_completed_batch: int | None = None
    # Spark's own: a batch is being planned or run; what the query's thread is doing
    trigger_active: bool | None = None
    status_message: str | None = None
    running_tasks: dict[str, int] | None = None  # per executor id, None when Spark cannot say
    # from the query's last progress report (job_runtime.query.progress.progress_fields)
    last_batch_id: int | None = None
    watermark: str | None = None
    watermark_ms: int | None = None
    input_rows_per_second: float | None = None
    processed_rows_per_second: float | None = None
    num_input_rows: int | None = None
    batch_duration_ms: int | None = None
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    rows_dropped_by_watermark: int | None = None
    last_progress_at: str | None = None
    late_rows_dropped_total: int | None = None
    last_error: str | None = None
    state_partitions: int | None = None
    checkpoint_location: str | None = None
    restored_from: str | None = None
    restore_skipped: bool | None = None
    spark_version: str | None = None
    savepoint_in_progress: SavepointStatus | None = None
    last_savepoint: SavepointStatus | None = None
    storage: StorageStatus | None = None

    @field_validator("state", mode="before")
    @classmethod
    def _known_state(cls, value: Any) -> Any:
        # a state this reader does not know (a newer runtime's) reads as "not said"
        return value if value in RunState._value2member_map_ else None

    @field_validator("storage", mode="before")
    @classmethod
    def _storage(cls, value: Any) -> Any:
        return value if isinstance(value, dict) else None  # absent on an older runtime

    @property
    def ready(self) -> bool:
        """The query is active and has completed a batch in this run, without an error."""
        return self.state is RunState.RUNNING and self.last_batch_id is not None and not self.last_error
