"""A warm standby (--standby): the Runner's wait for its release, and the release request.

Mixed into job_runtime.run.runner.Runner. The operator starts a standby driver of a job's new
spec while the job's driver still runs (streamjob_operator.reconcile.decide.standby). The
standby builds the Spark session (and so its executors), checks the job
(job_runtime.query.start.check_job) and warms what the start after the release uses first
(job_runtime.run.warmup), then reports STANDBY on /status and waits for
POST /release with the savepoint to restore. Until then nothing of the checkpoint, the sources
or the outputs is touched and the epoch is not taken: taking it would fence the running
driver. After the release the Runner goes the usual way (claim, epoch, restore, start), so
the data stops only for the old driver's stop-with-savepoint, the restore and the first batch.
"""

from __future__ import annotations

import logging
import queue
import threading
from dataclasses import replace
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from job_runtime.query import start
from job_runtime.run import warmup
from job_runtime.run.control import ControlError
from job_runtime.run.savepoint_requests import Command, ReleaseCommand, StopCommand
from job_runtime.settings import RuntimeSettings
from streamjob_contract.jobdef import JobDefinition
from streamjob_contract.runtime_status import RunState
from streamjob_contract.s3 import S3Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("job_runtime.runner")


class StandbyOps:
    """The standby half of the Runner (job_runtime.run.runner)."""

    settings: RuntimeSettings
    job: JobDefinition
    s3_config: S3Config
    _lock: threading.RLock
    _commands: queue.Queue[Command]
    _state: RunState
    _spark: SparkSession | None
    _stop_reason: str | None
    _released: str | None = None  # the savepoint the release asked to restore

    def _build_session(self) -> SparkSession:
        raise NotImplementedError

    def release(self, restore_from: str) -> dict[str, Any]:
        """POST /release: a standby that is ready restores ``restore_from`` and starts; a repeated release with
        the same savepoint is answered again and does nothing more (the operator retries until it sees the state move)."""
        with self._lock:
            if not self.settings.standby:
                raise ControlError(HTTPStatus.CONFLICT, "this driver is not a standby (--standby)")
            if self._released is not None:
                if self._released != restore_from:
                    raise ControlError(HTTPStatus.CONFLICT, f"already released with savepoint {self._released}")
                return {"state": self._state.value, "restoreFrom": self._released}
            if self._state is not RunState.STANDBY:
                raise ControlError(HTTPStatus.CONFLICT, f"the standby is {self._state.value}, not STANDBY: not ready to take over")
            self._released = restore_from
        self._commands.put(ReleaseCommand(restore_from))
        log.info("accepted release job=%s restoreFrom=%s", self.settings.job_id, restore_from)
        return {"state": self._state.value, "restoreFrom": restore_from}

    def _released_standby(self) -> bool:
        """--standby: waits for the release; True once released (the settings then restore its savepoint),
        False when stopped first."""
        released = self._wait_for_release()
        if released is None:
            return False
        with self._lock:
            self.settings = replace(self.settings, restore_from=released)
            self._state = RunState.STARTING
        return True

    def _wait_for_release(self) -> str | None:
        """--standby: session and job checked, first uses warmed, then STANDBY until released (the savepoint to
        restore) or stopped (None). Savepoint requests are refused meanwhile (request_savepoint takes them only
        while RUNNING)."""
        self._spark = self._build_session()
        start.check_job(self._spark, self.job, self.settings)
        steps = warmup.plan(self._spark, self.job, self.settings, self.s3_config)
        warmup.warm_up(steps, job=self.settings.job_id, stopped=lambda: self._stop_reason is not None)
        with self._lock:
            if self._stop_reason:
                return None
            self._state = RunState.STANDBY
        log.info("standby ready job=%s checkpoint=%s note=waiting for POST /release", self.settings.job_id,
                 self.settings.checkpoint_location)
        while True:
            command = self._commands.get()
            if isinstance(command, StopCommand):
                return None
            if isinstance(command, ReleaseCommand):
                log.info("released standby job=%s restoreFrom=%s", self.settings.job_id, command.restore_from)
                return command.restore_from
