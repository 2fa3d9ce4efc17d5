"""The runtime's life in the driver: restore, start, watch, savepoint, stop, and the exit code.

Called by job_runtime.main (`run`). The Runner owns the StreamingQuery: only its main thread starts and
stops it. The control endpoint's threads and the SIGTERM handler talk to it through a command queue; a
savepoint taken while running is written from a worker thread, because the query keeps going.

Before the query starts: the checkpoint claimed, this driver's epoch taken, the checkpoint repaired,
restored or its pin checked, held against --expect-committed (job_runtime.run.startup). The main loop
checks the epoch (job_runtime.checkpoints.epoch); a replaced driver stops its query and exits FENCED.

--allow-non-restored-state: when the query fails planning its first batch because the checkpoint holds
state of stateful operators it no longer has, that state is dropped and the query started once more
(job_runtime.checkpoints.nonrestored); operator changes Spark cannot map exit RESTORE_REFUSED.

Stop-with-savepoint and savepoints while running: job_runtime.run.savepoint_requests; --standby: job_runtime.run.standby.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from job_runtime.checkpoints import epoch, janitor, nonrestored
from job_runtime.kafka.offsets_watch import OffsetsWatch, kafka_offsets_deadline
from job_runtime.query import pipeline, start
from job_runtime.query.errors import describe, interrupted_by_stop
from job_runtime.query.progress import LateRowsTotal, batch_lines, progress_dict, progress_fields
from job_runtime.run import standby, startup
from job_runtime.run.savepoint_requests import Command, SavepointCommand, SavepointOps, SavepointRecord, StopCommand
from job_runtime.run.startup import CheckpointBehind, RestoreRefused
from job_runtime.settings import RuntimeSettings
from streamjob_contract import checkpoint
from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.jobdef import JobDefinition, JobDefinitionError
from streamjob_contract.runtime_status import RunState, RuntimeStatus
from streamjob_contract.s3 import S3Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("job_runtime.runner")

POLL_SECONDS = 0.5
STATUS_CACHE_SECONDS = 2.0
WORKER_JOIN_SECONDS = 300.0


class Runner(SavepointOps, standby.StandbyOps):
    """Implements job_runtime.run.control.Controller; `run()` returns the exit code."""

    def __init__(self, settings: RuntimeSettings, job: JobDefinition, s3_config: S3Config) -> None:
        self.settings = settings
        self.job = job
        self.s3_config = s3_config
        self._lock = threading.RLock()
        self._commands: queue.Queue[Command] = queue.Queue()
        self._state = RunState.STARTING
        self._spark: SparkSession | None = None
        self._query: StreamingQuery | None = None
        self._last_error: str | None = None
        self._restored_from: str | None = None
        self._restore_skipped = False
        self._savepoints: OrderedDict[str, SavepointRecord] = OrderedDict()
        self._active_savepoint: SavepointRecord | None = None
        self._worker: threading.Thread | None = None
        self._stop_reason: str | None = None
        self._latest_completed: tuple[float, str | None, int | None] = (0.0, None, None)  # (listed at, for report, batch)
        self._late_rows = LateRowsTotal()
        self._query_starts = 0
        self._dropped_state = False
        self._janitor: janitor.Janitor | None = None
        self._offsets_wait = OffsetsWatch(kafka_offsets_deadline(job))
        self._fence: epoch.Fence | None = None
        self._fence_checks = epoch.Throttle(epoch.CHECK_SECONDS)
        self.final_savepoint: SavepointRecord | None = None

    # ---- Controller: called from the control endpoint's threads ---------------------------

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def last_error(self) -> str | None:
        return self._last_error

    def health(self) -> tuple[bool, dict[str, Any]]:
        return self._state != RunState.FAILED, {"state": self._state.value, "job": self.settings.job_id}

    def status(self) -> dict[str, Any]:
        query = self._query
        progress = None
        query_id = run_id = None
        trigger: dict[str, Any] = {}
        if query is not None:
            try:
                query_id, run_id = str(query.id), str(query.runId)
                trigger = dict(query.status)
                last = query.lastProgress
                if last is not None:
                    progress = progress_dict(last)
                    self._count_late_rows(query, run_id, progress)
            except Exception as err:  # the JVM may be going away; status must still answer
                log.debug("could not read query progress: %s", err)
        with self._lock:
            late_rows_total = self._late_rows.total
            active = self._active_savepoint.to_json() if self._active_savepoint else None
            latest = list(self._savepoints.values())[-1].to_json() if self._savepoints else None
        # the contract type the operator reads it with (streamjob_contract.runtime_status) checks every field
        return RuntimeStatus.checked({
            "job": self.settings.job_id,
            "state": self._state.value,
            "queryId": query_id,
            "runId": run_id,
            "queryStarts": self._query_starts,
            "latestCompletedBatch": self._latest_completed_batch(report=(progress or {}).get("timestamp")),
            # Spark's own: a batch is being planned or run; what the query's thread is doing
            "triggerActive": trigger.get("isTriggerActive"),
            "statusMessage": trigger.get("message"),
            "runningTasks": self._running_tasks(),
            **progress_fields(progress),
            "lateRowsDroppedTotal": late_rows_total,
            "lastError": self._last_error,
            "statePartitions": self.settings.state_partitions,
            "checkpointLocation": self.settings.checkpoint_location,
            "restoredFrom": self._restored_from,
            "restoreSkipped": self._restore_skipped,
            "sparkVersion": self._spark.version if self._spark is not None else None,
            "savepointInProgress": active,
            "lastSavepoint": latest,
            "storage": self._janitor.report() if self._janitor is not None else None,
        })

    def _running_tasks(self) -> dict[str, int] | None:
        """Tasks running now per executor id (Spark's task scheduler), None when it cannot say."""
        spark = self._spark
        if spark is None:
            return None
        try:
            entries = spark.sparkContext._jsc.sc().taskScheduler().runningTasksByExecutors().toList()
            return {str(e._1()): int(e._2()) for e in (entries.apply(i) for i in range(entries.size())) if int(e._2()) > 0}
        except Exception as err:  # another Spark's internals: the field stays empty
            log.debug("could not read running tasks: %s", err)
            return None

    def _count_late_rows(self, query: Any, run_id: str | None, last: dict[str, Any]) -> None:
        with self._lock:
            history = self._late_rows.needs_history(run_id, last)
        reports = [progress_dict(r) for r in query.recentProgress] if history else [last]
        with self._lock:
            self._late_rows.add(run_id, reports)

    def request_stop(self, reason: str = "request") -> dict[str, Any]:
        self._commands.put(StopCommand(reason))
        return {"state": RunState.STOPPING.value}

    def on_signal(self, signum: int, _frame: Any = None) -> None:
        """SIGTERM/SIGINT: stop cleanly (exit STOPPED_BY_REQUEST), never die with 143."""
        import signal

        name = signal.Signals(signum).name
        log.info("received signal job=%s signal=%s", self.settings.job_id, name)
        self._stop_reason = self._stop_reason or name
        self._commands.put(StopCommand(name))

    # ---- the main thread ---------------------------------------------------------------

    def run(self) -> ExitCode:
        try:
            return self._run()
        except JobDefinitionError as err:
            return self._fail(ExitCode.INVALID_JOB, str(err))
        except RestoreRefused as err:
            return self._fail(ExitCode.RESTORE_REFUSED, str(err))
        except (CheckpointBehind, epoch.FencedError) as err:
            return self._fail(ExitCode.FENCED if isinstance(err, epoch.FencedError) else ExitCode.CHECKPOINT_BEHIND, str(err))
        except Exception as err:
            log.exception("runtime failed job=%s", self.settings.job_id)
            return self._fail(ExitCode.FAILED, describe(err))
        finally:
            if self._janitor is not None:
                self._janitor.stop()
            self._join_worker()

    def _run(self) -> ExitCode:
        if self.settings.standby and not self._released_standby():
            return self._stopped()
        # Everything that can refuse the run without a JVM goes first: a refusal is then quick.
        startup.claim_checkpoint(self.settings, self.s3_config)
        self._fence = startup.take_epoch(self.settings, self.s3_config)  # before anything repairs or plans
        startup.recover_checkpoint(self.settings, self.s3_config)
        restore = startup.restore_needed(self.settings, self.s3_config)
        startup.check_expected_batch(self.settings, self.s3_config, restoring=restore)
        self._restore_skipped = self.settings.restore_from is not None and not restore
        if restore:
            startup.check_savepoint(self.settings, self.s3_config)
        else:
            startup.check_pin(self.settings, self.s3_config)
        self._spark = self._spark or self._build_session()  # a released standby's is built
        if self._stop_reason:
            return self._stopped()
        if restore:
            self._state = RunState.RESTORING
            startup.restore(self.settings, self.s3_config, self._spark)
            self._restored_from = self.settings.restore_from
            startup.check_pin(self.settings, self.s3_config)
        if self._stop_reason:
            return self._stopped()
        baseline = self._committed_before_start()
        self._start_query()
        self._start_janitor(baseline)
        while True:
            try:
                command: Command | None = self._commands.get(timeout=POLL_SECONDS)
            except queue.Empty:
                command = None
            ended = self._check_query()
            if ended is not None:
                return ended
            if isinstance(command, StopCommand):
                return self._stop(command.reason)
            if isinstance(command, SavepointCommand):
                if command.record.stop:
                    code = self._stop_with_savepoint(command.record)
                    if code is not None:
                        return code
                else:
                    self._worker = threading.Thread(
                        target=self._savepoint_while_running, args=(command.record,), name="savepoint", daemon=True
                    )
                    self._worker.start()

    def _build_session(self) -> "SparkSession":
        from job_runtime.query.session import build_session

        return build_session(self.settings)

    def _committed_before_start(self) -> int | None | Exception:
        try:
            return checkpoint.latest_completed_batch(self.settings.checkpoint_location, s3=self.s3_config)
        except Exception as err:  # hygiene waits for another driver then; the query need not
            return err

    def _start_janitor(self, baseline: int | None | Exception) -> None:
        """Storage hygiene (job_runtime.checkpoints.janitor): prunes once this driver has committed a batch past `baseline`."""
        if isinstance(baseline, Exception):
            log.warning("storage hygiene off job=%s reason=could not read the checkpoint's commits before the start: %s",
                        self.settings.job_id, describe(baseline))
            return

        def writing() -> list[str]:
            with self._lock:
                return [self._active_savepoint.path] if self._active_savepoint is not None else []

        self._janitor = janitor.Janitor(
            self.settings, self.s3_config, latest_completed=self._latest_completed_batch, writing=writing
        )
        self._janitor.start(baseline)

    def _start_query(self, once: bool = False) -> None:
        assert self._spark is not None
        restored = self._restored_from is not None and self._query_starts == 0  # the start right after the restore
        query = start.start_query(self._spark, self.job, self.settings, once=once, fence=self._fence, restored=restored)
        with self._lock:
            self._query = query
            self._query_starts += 1
            self._state = RunState.RUNNING
        log.info(
            "started query job=%s queryId=%s runId=%s checkpoint=%s trigger=%s",
            self.settings.job_id, query.id, query.runId, self.settings.checkpoint_location, self.settings.trigger_interval,
        )

    def _check_query(self) -> ExitCode | None:
        """The exit code when the query ended by itself or failed; None while it runs."""
        query = self._query
        assert query is not None
        if (fenced := self._fenced()) is not None:
            return fenced
        if query.isActive:
            stalled = self._offsets_wait.stalled(query)
            if stalled is None:
                return None
            error_text = self._stop_query() or stalled
            return self._fail(ExitCode.FAILED, f"query failed: {error_text}{pipeline.kafka_context(self.job, error_text)}")
        error = query.exception()
        if error is not None:
            if nonrestored.is_operator_check(str(error)):
                return self._operators_changed(error)  # None: started again without the dropped state
            context = pipeline.kafka_context(self.job, str(error))
            return self._fail(ExitCode.FAILED, f"query failed: {describe(error)}{context}")
        self._join_worker()
        self._state = RunState.FINISHED
        for line in batch_lines(query.recentProgress, self.settings.job_id):  # where a run to its end spent its time
            log.info("%s", line)
        log.info("finished query job=%s reason=the query ended by itself", self.settings.job_id)
        return ExitCode.FINISHED

    def _fenced(self) -> ExitCode | None:
        """A newer driver took the checkpoint: stop the query (its error is the fence's) and exit FENCED."""
        running = bool(self._query and self._query.isActive)
        if self._fence is None or not epoch.replaced(self._fence, self._fence_checks, running=running):
            return None
        self._stop_query()
        return self._fail(ExitCode.FENCED, self._fence.message("the runtime's check"))

    def _operators_changed(self, error: BaseException) -> ExitCode | None:
        """Spark refused the checkpoint's stateful operators: drop non-restored state and start
        again once (allowNonRestoredState, returns None), or refuse (RESTORE_REFUSED)."""
        location = self.settings.checkpoint_location
        decision = nonrestored.decide(
            str(error), allow_non_restored_state=self.settings.allow_non_restored_state, checkpoint=location
        )
        assert decision is not None
        if decision.refusal is not None:
            return self._fail(ExitCode.RESTORE_REFUSED, decision.refusal)
        if self._dropped_state:
            return self._fail(ExitCode.RESTORE_REFUSED, f"query failed again after dropping non-restored state: {describe(error)}")
        self._dropped_state = True
        nonrestored.drop_operator_state(location, decision.drop, job=self.settings.job_id, s3=self.s3_config)
        self._start_query()
        return None

    def _stop_query(self, asked_to_end: bool = False) -> str | None:
        """Stop the query; the error it had failed with, if it had.

        ``stop()`` interrupts the stream thread wherever it is; a read it interrupts
        (the S3 stream's "Read interrupted while waiting for data") ends the query
        with that exception, which is our stop, not a failure: the batch in flight
        re-runs from the write-ahead log, as after any stop.
        """
        query = self._query
        assert query is not None
        # asked_to_end: drain set the state the query reports as not active; an error came after
        failed_before = None if asked_to_end or query.isActive else query.exception()
        query.stop()
        if failed_before is not None:
            return describe(failed_before)
        error = query.exception()
        if error is None:
            return None
        if interrupted_by_stop(error):
            log.info("stopped query job=%s note=the stop interrupted the batch in flight, which re-runs from the log error=%s",
                     self.settings.job_id, describe(error))
            return None
        return describe(error)

    def _stop(self, reason: str) -> ExitCode:
        self._stop_reason = self._stop_reason or reason
        with self._lock:
            self._state = RunState.STOPPING
        log.info("stopping query job=%s reason=%s", self.settings.job_id, reason)
        error = self._stop_query()
        if error is not None:
            return self._fail(ExitCode.FAILED, f"query failed: {error}")
        self._join_worker()
        return self._stopped()

    def _stopped(self) -> ExitCode:
        self._state = RunState.STOPPED
        log.info("stopped job=%s reason=%s", self.settings.job_id, self._stop_reason)
        return ExitCode.STOPPED_BY_REQUEST

    def _latest_completed_batch(self, report: str | None = None) -> int | None:
        """The checkpoint's latest committed batch, listed at most every STATUS_CACHE_SECONDS, and again at once
        for a new progress report (`report`, its timestamp: Spark reports a batch after committing it), so
        /status never says a batch ran while its latestCompletedBatch is older (the operator's Ready and
        lastCheckpoint come from the same answer). Without a report (the janitor) the cache serves."""
        at, listed_for, value = self._latest_completed
        if (report is None or report == listed_for) and time.monotonic() - at < STATUS_CACHE_SECONDS:
            return value
        try:
            value = checkpoint.latest_completed_batch(self.settings.checkpoint_location, s3=self.s3_config)
        except Exception as err:
            log.debug("could not read latest completed batch: %s", err)
        self._latest_completed = (time.monotonic(), report or listed_for, value)
        return value

    def _join_worker(self) -> None:
        worker = self._worker
        if worker is not None and worker.is_alive():
            log.info("waiting for savepoint in progress job=%s", self.settings.job_id)
            worker.join(WORKER_JOIN_SECONDS)

    def _fail(self, code: ExitCode, message: str) -> ExitCode:
        with self._lock:
            self._last_error = message
            self._state = RunState.FAILED
        log.error("failed job=%s exitCode=%d error=%s", self.settings.job_id, int(code), message)
        print(f"streamjob-runtime: {message}", file=sys.stderr, flush=True)
        return code
