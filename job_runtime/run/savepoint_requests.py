"""Savepoints in the driver: the control endpoint's requests, stop-with-savepoint, and one taken while running.

A mixin of job_runtime.run.runner.Runner, which owns the query and the state these
methods read and set (declared below for the type checker). Stop-with-savepoint:
stop the query between batches (job_runtime.query.drain: the batch in flight finishes
and commits, no new one starts; past a deadline the stop interrupts it, its
offsets stay in the write-ahead log and the restore re-runs it), write the
savepoint, exit STOPPED_FOR_SAVEPOINT. If the savepoint fails before its
manifest PUT, the query is started again from its checkpoint in this process and
the savepoint reported FAILED: a failing savepoint never costs a running job.
Once the manifest PUT was attempted the query is never started again (the
savepoint may exist, and batches committed after it would put it behind the job):
exit STOPPED_FOR_SAVEPOINT when the manifest read back is ours, else FAILED.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from job_runtime.query import drain
from job_runtime.run.control import ControlError
from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.jobdef import JobDefinition
from job_runtime.query.errors import describe
from streamjob_contract.s3 import S3Config
from job_runtime.savepoints.target import SavepointPathError, confine
from job_runtime.savepoints.write import ManifestAttemptedError
from job_runtime.settings import RuntimeSettings
from streamjob_contract.runtime_status import RunState, SavepointState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("job_runtime.runner")

SAVEPOINT_HISTORY = 20


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass
class SavepointRecord:
    id: str
    path: str
    stop: bool
    state: SavepointState = SavepointState.IN_PROGRESS
    batch_id: int | None = None
    error: str | None = None
    requested_at: str = field(default_factory=utc_now)
    finished_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state.value,
            "path": self.path,
            "stop": self.stop,
            "batchId": self.batch_id,
            "error": self.error,
            "requestedAt": self.requested_at,
            "finishedAt": self.finished_at,
        }


@dataclass(frozen=True)
class StopCommand:
    reason: str


@dataclass(frozen=True)
class SavepointCommand:
    record: SavepointRecord


@dataclass(frozen=True)
class ReleaseCommand:
    """A standby's release (POST /release): restore this savepoint, take the checkpoint, start the query."""

    restore_from: str


Command = StopCommand | SavepointCommand | ReleaseCommand


class SavepointOps:
    """The savepoint half of the Runner (job_runtime.run.runner)."""

    settings: RuntimeSettings
    job: JobDefinition
    s3_config: S3Config
    final_savepoint: SavepointRecord | None
    _lock: threading.RLock
    _commands: queue.Queue[Command]
    _state: RunState
    _spark: SparkSession | None
    _query: StreamingQuery | None
    _savepoints: OrderedDict[str, SavepointRecord]
    _active_savepoint: SavepointRecord | None
    _stop_reason: str | None

    if TYPE_CHECKING:  # the Runner's own
        def _start_query(self, once: bool = False) -> None: ...

        def _stop_query(self, asked_to_end: bool = False) -> str | None: ...

        def _fail(self, code: ExitCode, message: str) -> ExitCode: ...

    def request_savepoint(self, path: str | None, stop: bool, savepoint_id: str | None = None) -> dict[str, Any]:
        """Accepts a savepoint request, named ``savepoint_id`` when the caller chose one; a request whose id is
        already known is answered again, whatever its state, and nothing new is started."""
        with self._lock:
            known = self._savepoints.get(savepoint_id) if savepoint_id else None
            if known is not None:
                return {"id": known.id, "path": known.path}
            if self._state != RunState.RUNNING or self._stop_reason is not None:
                raise ControlError(HTTPStatus.CONFLICT, f"the job is {self._state.value}: savepoints are taken while RUNNING")
            if self._active_savepoint is not None:
                raise ControlError(
                    HTTPStatus.CONFLICT, f"savepoint {self._active_savepoint.id} is in progress; wait for it to finish"
                )
            target = path or self._default_savepoint_path()
            try:
                confine(target, self.settings.savepoint_location, self.settings.checkpoint_location)
            except SavepointPathError as err:
                log.warning("refused savepoint request job=%s reason=%s", self.settings.job_id, err)
                raise ControlError(HTTPStatus.BAD_REQUEST, str(err)) from None
            record = SavepointRecord(id=savepoint_id or uuid.uuid4().hex[:12], path=target, stop=stop)
            self._active_savepoint = record
            self._remember(record)
        self._commands.put(SavepointCommand(record))
        log.info("accepted savepoint request job=%s id=%s path=%s stop=%s", self.settings.job_id, record.id, record.path, stop)
        return {"id": record.id, "path": record.path}

    def savepoint(self, savepoint_id: str) -> dict[str, Any] | None:
        with self._lock:
            record = self._savepoints.get(savepoint_id)
            return record.to_json() if record else None

    def savepoints(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.to_json() for r in self._savepoints.values()]

    def _stop_with_savepoint(self, record: SavepointRecord) -> ExitCode | None:
        with self._lock:
            self._state = RunState.SAVEPOINTING
        log.info("stopping query for savepoint job=%s id=%s path=%s", self.settings.job_id, record.id, record.path)
        error = self._stop_between_batches()
        if error is not None:
            self._finish_savepoint(record, error=f"the query had failed: {error}")
            return self._fail(ExitCode.FAILED, f"query failed: {error}")
        try:
            batch_id = self._write_savepoint(record.path)
        except ManifestAttemptedError as err:
            return self._end_after_manifest(record, err)
        except Exception as err:
            self._finish_savepoint(record, error=describe(err))
            log.error(
                "failed savepoint job=%s id=%s path=%s error=%s; restarting the query from its checkpoint",
                self.settings.job_id, record.id, record.path, describe(err),
            )
            self._start_query()
            return None
        self._finish_savepoint(record, batch_id=batch_id)
        self.final_savepoint = record
        self._state = RunState.STOPPED
        log.info("stopped for savepoint job=%s id=%s path=%s batchId=%d", self.settings.job_id, record.id, record.path, batch_id)
        return ExitCode.STOPPED_FOR_SAVEPOINT

    def _end_after_manifest(self, record: SavepointRecord, err: ManifestAttemptedError) -> ExitCode:
        """The manifest PUT was attempted and raised: end the driver, never start the query again."""
        self.final_savepoint = record
        if err.present:
            batch_id = err.manifest.batch_id
            self._finish_savepoint(record, batch_id=batch_id)
            self._state = RunState.STOPPED
            log.warning("stopped for savepoint job=%s id=%s path=%s batchId=%d; its manifest is present although "
                        "the write raised: %s", self.settings.job_id, record.id, record.path, batch_id, err.detail)
            return ExitCode.STOPPED_FOR_SAVEPOINT
        self._finish_savepoint(record, error=describe(err))
        return self._fail(ExitCode.FAILED, f"savepoint {record.path} failed after its manifest write was attempted "
                          f"({err.detail}); the query was not started again, so the checkpoint ends at the batch "
                          "the savepoint would hold")

    def _stop_between_batches(self) -> str | None:
        """Stop after the batch in flight, before the next (job_runtime.query.drain); the error the query
        had failed with, if it had. Past drain.drain_seconds() the stop interrupts the batch."""
        query, spark = self._query, self._spark
        assert query is not None and spark is not None
        deadline = time.monotonic() + drain.drain_seconds(self.settings.savepoint_timeout_seconds)
        asked = query.isActive and drain.end_after_batch(query, spark)
        if asked:
            how = drain.wait_ended(query, deadline)
            log.info("ended query between batches job=%s how=%s", self.settings.job_id, how)
        error = self._stop_query(asked_to_end=asked)
        if error is not None:
            return error
        try:
            planned = drain.planned_batch(self.settings.checkpoint_location, self.s3_config)
        except Exception as err:  # the savepoint reads the checkpoint again and says what it holds
            log.warning("could not look for a planned batch job=%s error=%s", self.settings.job_id, describe(err))
            return None
        if planned is None:
            return None
        if time.monotonic() >= deadline or self.job.pipeline is None:
            # an entrypoint may start its own query with its own trigger: not run again here
            log.warning("stopped query with batch %d planned job=%s reason=%s; the savepoint holds it and a restore re-runs it",
                        planned, self.settings.job_id, "deadline passed" if self.job.pipeline else "entrypoint job")
            return None
        log.info("finishing planned batch job=%s batchId=%d reason=the stop caught it before it committed", self.settings.job_id, planned)
        try:
            self._start_query(once=True)
        except Exception as err:  # the savepoint then holds the planned batch, as after a deadline
            log.warning("stopped query with batch %d planned job=%s reason=could not run it alone: %s",
                        planned, self.settings.job_id, describe(err))
            return None
        with self._lock:
            self._state = RunState.SAVEPOINTING
        finished = drain.wait_finished(self._query, deadline)  # type: ignore[arg-type]
        error = self._stop_query()
        if error is None and not finished:
            log.warning("stopped query with batch %d planned job=%s reason=deadline passed; the savepoint holds it",
                        planned, self.settings.job_id)
        return error

    def _savepoint_while_running(self, record: SavepointRecord) -> None:
        try:
            batch_id = self._write_savepoint(record.path)
        except ManifestAttemptedError as err:
            if not err.present:
                self._finish_savepoint(record, error=describe(err))
                log.error("failed savepoint job=%s id=%s path=%s error=%s", self.settings.job_id, record.id, record.path, describe(err))
                return
            # the manifest is there: the savepoint is complete, whatever the call said (as the operator will read it)
            batch_id = err.manifest.batch_id
            log.warning("completed savepoint job=%s id=%s path=%s batchId=%d although its write raised: %s",
                        self.settings.job_id, record.id, record.path, batch_id, err.detail)
        except Exception as err:
            self._finish_savepoint(record, error=describe(err))
            log.error("failed savepoint job=%s id=%s path=%s error=%s", self.settings.job_id, record.id, record.path, describe(err))
            return
        self._finish_savepoint(record, batch_id=batch_id)
        log.info("completed savepoint job=%s id=%s path=%s batchId=%d", self.settings.job_id, record.id, record.path, batch_id)

    def _write_savepoint(self, path: str) -> int:
        from job_runtime.savepoints import write_savepoint

        assert self._spark is not None
        started = time.monotonic()
        manifest = write_savepoint(
            self.settings.checkpoint_location,
            path,
            job_name=self.settings.name,
            job_namespace=self.settings.namespace,
            job_hash=self.settings.job_hash,
            spark_version=self._spark.version,
            state_partitions=self.settings.state_partitions,
            s3_config=self.s3_config,
        )
        log.info(
            "wrote savepoint job=%s path=%s batchId=%d files=%d bytes=%d seconds=%.1f",
            self.settings.job_id, path, manifest.batch_id, len(manifest.files), manifest.total_bytes, time.monotonic() - started,
        )
        return manifest.batch_id

    def _finish_savepoint(self, record: SavepointRecord, *, batch_id: int | None = None, error: str | None = None) -> None:
        with self._lock:
            record.batch_id = batch_id
            record.error = error
            record.state = SavepointState.FAILED if error is not None else SavepointState.COMPLETED
            record.finished_at = utc_now()
            if self._active_savepoint is record:
                self._active_savepoint = None

    def _remember(self, record: SavepointRecord) -> None:
        self._savepoints[record.id] = record
        while len(self._savepoints) > SAVEPOINT_HISTORY:
            self._savepoints.popitem(last=False)

    def _default_savepoint_path(self) -> str:
        prefix = self.settings.savepoint_location
        if not prefix:
            raise ControlError(HTTPStatus.BAD_REQUEST, "body.path: required, the runtime has no --savepoint-location")
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return f"{prefix.rstrip('/')}/savepoint-{stamp}-{uuid.uuid4().hex[:6]}"
