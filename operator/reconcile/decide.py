"""The decision: given (spec, status, observations, now), the actions to take and the next status.

Pure: no I/O, no clock, no kopf or Kubernetes client (tests/unit/test_layers.py
checks the imports). Called once per reconcile pass by
``streamjob_operator.handlers`` between ``reconcile.observe`` and ``k8s.act``.

Status is the write-ahead log. A disruptive step is decided together with the
status that records it (``status.operation``: kind, phase, target spec hash,
savepoint path), and the glue writes that status *before* acting, so an
operator killed at any point resumes from the recorded phase; every action is
idempotent. One phase per pass and at most one disruptive action per pass.

Operations and their phases::

    deploy    Deploying
    restart   Stopping -> Waiting (restart delay) -> Deploying
    upgrade   [Savepointing ->] Stopping -> Deploying -> [AwaitingReady]   (-> rollback)
    rollback  Stopping -> Deploying
    suspend   [Savepointing ->] Stopping                                  (-> Suspended)
    resume    Deploying
    savepoint Savepointing
    delete    [Savepointing ->] Stopping                                  (-> finalizer removed)
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from streamjob_operator.api.spec import DesiredState, StreamJobSpec, UpgradeMode
from streamjob_operator.api.status import (
    MAX_FAILURE_TIMES,
    MAX_MESSAGE,
    MAX_SAVEPOINT_HISTORY,
    BlockedChange,
    CheckpointInfo,
    Condition,
    JobMetrics,
    LifecycleState,
    Operation,
    SavepointInfo,
    StreamJobStatus,
)

from . import names
from .changes import ChangeKind, changed_fields, classify
from .model import (
    Action,
    CreateDriver,
    Decision,
    DeleteDriver,
    DeleteOwnedObjects,
    DeleteSavepoint,
    DriverPod,
    EnsureSupportObjects,
    Event,
    ExitKind,
    Observations,
    PodPhase,
    SavepointState,
    TriggerSavepoint,
    is_disruptive,
)
from .policy import describe_policy, fmt_time, parse_duration, parse_time, restart_delay

POLL_SECONDS = 2.0  # while an operation waits on the world
FORCE_DELETE_GRACE_SECONDS = 30  # after the deletion deadline, how long force-deleted pods may linger


class OpKind(str, Enum):
    deploy = "deploy"
    restart = "restart"
    upgrade = "upgrade"
    rollback = "rollback"
    suspend = "suspend"
    resume = "resume"
    savepoint = "savepoint"
    delete = "delete"


class Phase(str, Enum):
    savepointing = "Savepointing"
    stopping = "Stopping"
    waiting = "Waiting"
    deploying = "Deploying"
    awaiting_ready = "AwaitingReady"
    done = "Done"  # deletion finished; kopf removes the finalizer


class RestoreMode(str, Enum):
    savepoint = "savepoint"
    last_state = "last-state"
    stateless = "stateless"


_STATE_OF_KIND = {
    OpKind.deploy: LifecycleState.deploying,
    OpKind.restart: LifecycleState.restarting,
    OpKind.upgrade: LifecycleState.upgrading,
    OpKind.rollback: LifecycleState.rolling_back,
    OpKind.suspend: LifecycleState.suspending,
    OpKind.resume: LifecycleState.deploying,
    OpKind.savepoint: LifecycleState.running,
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


def spec_dict(spec: StreamJobSpec) -> dict[str, Any]:
    return spec.model_dump(mode="json", by_alias=True, exclude_none=True)


def spec_json(spec: StreamJobSpec) -> str:
    """The canonical JSON recorded as lastReconciledSpec / lastStableSpec."""
    return json.dumps(spec_dict(spec), sort_keys=True, separators=(",", ":"))


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def spec_hash(spec: StreamJobSpec) -> str:
    return hash_text(spec_json(spec))


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def decide(spec: StreamJobSpec, status: StreamJobStatus, observations: Observations, now: datetime) -> Decision:
    """One pass of the control loop, as a value; see the module docstring."""
    p = _Pass(spec, status, observations, now)
    p.run()
    return p.decision()


class _Pass:
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

    # --- small helpers ---------------------------------------------------------------
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

    def blocked(self) -> bool:
        block = self.st.blocked_change
        return block is not None and block.spec_hash == spec_hash(self.spec)

    def block(self, reason: str, message: str) -> None:
        self.update(
            blocked_change=BlockedChange(
                spec_hash=spec_hash(self.spec),
                savepoint_nonce=self.spec.savepoint_nonce,
                restart_nonce=self.spec.restart_nonce,
                reason=reason,
                message=clip(message),
            )
        )

    def new_savepoint_path(self, trigger: str) -> str:
        assert self.spec.savepoint is not None
        return names.savepoint_path(self.spec.savepoint.location, self.obs.namespace, self.obs.name, trigger, self.now)

    # --- the pass ----------------------------------------------------------------------
    def run(self) -> None:
        self.observe_progress()
        if self.obs.deleting:
            self.deletion()
        elif self.st.operation is not None:
            self.continue_operation()
        else:
            self.steady()
        self.retention()
        self.conditions()
        self.update(observed_generation=self.obs.generation)

    def decision(self) -> Decision:
        creates = [a for a in self.actions if isinstance(a, CreateDriver)]
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

    def observe_progress(self) -> None:
        job = self.obs.job
        batch: int | None = None
        if job is not None and job.reachable:
            self.update(
                job=JobMetrics(
                    query_id=job.query_id,
                    run_id=job.run_id,
                    last_batch_id=job.last_batch_id,
                    watermark=job.watermark,
                    input_rows_per_second=job.input_rows_per_second,
                    processed_rows_per_second=job.processed_rows_per_second,
                    state_rows=job.state_rows,
                    observed_at=self.t(),
                )
            )
            batch = job.latest_completed_batch
        if batch is None:
            batch = self.obs.checkpoint_batch
        last = self.st.last_checkpoint
        if batch is not None and (last is None or last.batch_id != batch):
            self.update(last_checkpoint=CheckpointInfo(batch_id=batch, time=self.t()))

    # --- without an operation --------------------------------------------------------------
    def steady(self) -> None:
        st = self.st
        if st.state is None or st.last_reconciled_spec is None:
            self.first_deploy()
            return
        if self.delete_strays():
            return
        if st.state is LifecycleState.suspended:
            self.suspended()
        elif st.state in (LifecycleState.failed, LifecycleState.finished):
            self.stopped()
        else:
            self.running()

    def delete_strays(self) -> bool:
        """Drivers that are not the recorded one are deleted first: never two drivers for a job."""
        strays = [pod for pod in self.obs.drivers if pod.name != self.st.driver_pod]
        for pod in strays:
            if not pod.deleting:
                self.actions.append(DeleteDriver(pod.name))
                self.emit("Warning", "StrayDriverDeleted", f"Deleted driver pod {pod.name}: the current driver is {self.st.driver_pod}")
        if strays:
            self.again(1)
        return bool(strays)

    def first_deploy(self) -> None:
        if self.spec.state is DesiredState.suspended:
            self.update(state=LifecycleState.suspended, last_reconciled_spec=spec_json(self.spec))
            self.emit("Normal", "Suspended", "Created suspended: no driver deployed until spec.state is running")
            return
        initial = self.spec.initial_savepoint_path
        op = Operation(
            kind=OpKind.deploy.value,
            phase=Phase.deploying.value,
            target_spec_hash=spec_hash(self.spec),
            savepoint_path=initial,
            restore_mode=(RestoreMode.savepoint if initial else RestoreMode.stateless).value,
            started_at=self.t(),
            message=f"first deploy, restoring savepoint {initial}" if initial else "first deploy",
        )
        self.emit("Normal", "Deploying", f"Deploying the job{f' from savepoint {initial}' if initial else ''}")
        self.enter_deploying(op, spec_json(self.spec))

    def running(self) -> None:
        cur = self.current
        if cur is None:
            self.emit("Warning", "DriverLost", f"Driver pod {self.st.driver_pod} is gone without a request; restarting from the latest checkpoint")
            self.start_restart("driver pod disappeared")
            return
        if cur.terminated:
            self.driver_exited(cur)
            return
        if cur.deleting:
            self.again(1)
            return
        if self.job_ready():
            if self.st.restart_count:
                self.update(restart_count=0)
            if self.st.last_stable_spec != self.st.last_reconciled_spec:
                self.update(last_stable_spec=self.st.last_reconciled_spec)
        if self.spec.state is DesiredState.suspended and not self.blocked():
            self.start_suspend()
        elif self.start_change():
            pass
        elif self.spec.savepoint_nonce != self.st.last_savepoint_nonce:
            self.start_savepoint("manual")
        elif self.periodic_due():
            self.start_savepoint("periodic")

    def suspended(self) -> None:
        if self.spec.state is DesiredState.running:
            if self.refuse_repartition():
                return
            self.resume()
            return
        if self.spec.savepoint_nonce != self.st.last_savepoint_nonce:
            self.update(last_savepoint_nonce=self.spec.savepoint_nonce)
            where = f"; its last savepoint is {self.st.last_savepoint.path}" if self.st.last_savepoint else ""
            self.emit("Warning", "SavepointSkipped", f"No savepoint taken: the job is suspended{where}")

    def resume(self) -> None:
        last = self.st.last_savepoint
        if self.st.driver_epoch == 0:  # created suspended: this is the first deploy
            self.update(state=None, last_reconciled_spec=None)
            self.first_deploy()
            return
        if self.spec.upgrade_mode is UpgradeMode.stateless:
            mode, path = RestoreMode.stateless, None
        elif self.spec.upgrade_mode is UpgradeMode.savepoint and last is not None and last.trigger == "suspend":
            mode, path = RestoreMode.savepoint, last.path
        else:
            mode, path = RestoreMode.last_state, None
        op = Operation(
            kind=OpKind.resume.value,
            phase=Phase.deploying.value,
            target_spec_hash=spec_hash(self.spec),
            savepoint_path=path,
            restore_mode=mode.value,
            started_at=self.t(),
            message=f"resuming from savepoint {path}" if path else f"resuming ({mode.value})",
        )
        self.emit("Normal", "Resuming", f"Resuming the job {f'from savepoint {path}' if path else f'with upgradeMode {mode.value}'}")
        self.enter_deploying(op, spec_json(self.spec))

    def stopped(self) -> None:
        """Failed or Finished: wait for a spec change or a restartNonce."""
        if self.spec.state is DesiredState.suspended:
            self.update(
                operation=Operation(kind=OpKind.suspend.value, phase=Phase.stopping.value, restore_mode=RestoreMode.last_state.value,
                                    started_at=self.t(), message="suspending a stopped job (no savepoint possible)"),
                state=LifecycleState.suspending,
            )
            self.again(0)
            return
        assert self.st.last_reconciled_spec is not None
        kind = classify(json.loads(self.st.last_reconciled_spec), spec_dict(self.spec))
        if kind is ChangeKind.ignore:
            return
        self.update(restart_count=0, failure_times=[], last_error=None)
        if kind is ChangeKind.restart_only:
            self.emit("Normal", "Restarting", f"restartNonce changed: restarting the {self.st.state.value if self.st.state else ''} job from the latest checkpoint")
            self.update(last_reconciled_spec=spec_json(self.spec))
            self.start_restart("restartNonce changed")
            return
        if self.refuse_repartition():
            return
        mode = RestoreMode.stateless if self.spec.upgrade_mode is UpgradeMode.stateless else RestoreMode.last_state
        fields = ", ".join(changed_fields(json.loads(self.st.last_reconciled_spec), spec_dict(self.spec)))
        self.update(
            operation=Operation(kind=OpKind.upgrade.value, phase=Phase.stopping.value, target_spec_hash=spec_hash(self.spec),
                                restore_mode=mode.value, started_at=self.t(), message=clip(f"redeploying a stopped job: {fields}")),
            state=LifecycleState.upgrading,
            last_restart_nonce=self.spec.restart_nonce,
        )
        self.emit("Normal", "Upgrading", clip(f"Redeploying the stopped job with the changed spec ({fields}), {mode.value}"))
        self.again(0)

    def driver_exited(self, pod: DriverPod) -> None:
        kind = pod.exit_kind or (ExitKind.ended if pod.exit_code == 0 else ExitKind.failed)
        code = pod.exit_code
        detail = f": {pod.message}" if pod.message else ""
        if kind is ExitKind.ended:
            self.update(state=LifecycleState.finished, last_error=None)
            self.emit("Normal", "JobFinished", f"Driver {pod.name} ended by itself (exit {code}): the query finished")
            return
        if kind in (ExitKind.stopped, ExitKind.stopped_for_savepoint):
            self.emit("Warning", "DriverStopped",
                      f"Driver {pod.name} stopped without a request from the operator (exit {code}, {kind.value}); "
                      "restarting from the latest checkpoint (not counted as a failure)")
            self.start_restart(f"driver stopped (exit {code})")
            return
        if kind.permanent:
            self.fail(kind.value, f"Driver {pod.name} exited with {kind.value} (exit {code}), which a restart cannot fix{detail}")
            return
        times = [t for t in (parse_time(x) for x in self.st.failure_times) if t is not None] + [self.now]
        times = times[-MAX_FAILURE_TIMES:]
        policy = self.spec.restart_policy
        delay = restart_delay(policy, self.st.restart_count, times, self.now)
        self.update(failure_times=[fmt_time(t) for t in times], last_error=clip(pod.message or f"exit code {code}"))
        if delay is None:
            self.fail("RestartPolicyExhausted",
                      f"Driver {pod.name} failed (exit {code}){detail}; {describe_policy(policy)}, which are used up")
            return
        batch = self.st.last_checkpoint.batch_id if self.st.last_checkpoint else None
        self.update(
            restart_count=self.st.restart_count + 1,
            total_restarts=self.st.total_restarts + 1,
            next_restart_at=self.t(delay),
        )
        self.emit("Warning", "DriverFailed",
                  f"Driver {pod.name} failed (exit {code}){detail}; restart {self.st.restart_count} in {delay:g}s "
                  f"from the latest checkpoint{f' (batch {batch})' if batch is not None else ''}")
        self.start_restart(f"driver failed (exit {code})", counted=True)

    def fail(self, reason: str, message: str) -> None:
        self.update(state=LifecycleState.failed, operation=None, last_error=clip(message), next_restart_at=None)
        self.failure = (reason, message)
        self.emit("Warning", reason, message)

    def start_restart(self, why: str, counted: bool = False) -> None:
        self.update(
            operation=Operation(kind=OpKind.restart.value, phase=Phase.stopping.value, restore_mode=RestoreMode.last_state.value,
                                started_at=self.t(), message=clip(why)),
            state=LifecycleState.restarting,
            last_restart_nonce=self.spec.restart_nonce,
        )
        if not counted:
            self.update(next_restart_at=None)
        self.again(0)

    def refuse_repartition(self) -> bool:
        """True (and blocked, with an event) when the change needs a state repartition the runtime cannot do."""
        assert self.st.last_reconciled_spec is not None
        old = json.loads(self.st.last_reconciled_spec)
        if classify(old, spec_dict(self.spec)) is not ChangeKind.state_repartition:
            return False
        if self.spec.upgrade_mode is UpgradeMode.stateless:
            return False
        if self.spec.upgrade_mode is UpgradeMode.savepoint and self.obs.repartition_supported:
            return False
        if self.blocked():
            return True
        message = (
            f"spec.statePartitions: changing {old.get('statePartitions')} -> {self.spec.state_partitions} needs an offline "
            "state repartition from a savepoint, which the installed runtime does not support; the job keeps its "
            "current spec. Revert the change, or set upgradeMode stateless to start with fresh state."
        )
        self.block("StatePartitionsChangeRefused", message)
        self.emit("Warning", "StatePartitionsChangeRefused", message)
        return True

    def start_change(self) -> bool:
        """Starts rolling out a changed spec; True when the pass has done its work."""
        assert self.st.last_reconciled_spec is not None
        old = json.loads(self.st.last_reconciled_spec)
        new = spec_dict(self.spec)
        kind = classify(old, new)
        if kind is ChangeKind.ignore:
            if old != new:
                self.update(last_reconciled_spec=spec_json(self.spec))
            return False
        if self.blocked():
            return False
        if self.refuse_repartition():
            return True
        if kind is ChangeKind.restart_only:
            self.emit("Normal", "Restarting", "restartNonce changed: restarting the driver from the latest checkpoint")
            self.update(last_reconciled_spec=spec_json(self.spec))
            self.start_restart("restartNonce changed")
            return True
        fields = ", ".join(f for f, k in changed_fields(old, new).items() if k is not ChangeKind.ignore)
        mode = RestoreMode(self.spec.upgrade_mode.value)
        if mode is RestoreMode.savepoint and self.spec.savepoint is None:
            mode = RestoreMode.last_state
        op = Operation(kind=OpKind.upgrade.value, phase=Phase.stopping.value, target_spec_hash=spec_hash(self.spec),
                       restore_mode=mode.value, started_at=self.t(), message=clip(f"changed: {fields}"))
        if mode is RestoreMode.savepoint:
            assert self.spec.savepoint is not None
            op = op.model_copy(update={
                "phase": Phase.savepointing.value,
                "savepoint_path": self.new_savepoint_path("upgrade"),
                "trigger": "upgrade",
                "deadline": self.t(self.spec.savepoint.timeout_seconds),
            })
            self.update(last_savepoint_attempt_at=self.t())
        self.update(
            operation=op,
            state=LifecycleState.upgrading,
            blocked_change=None,
            last_savepoint_nonce=self.spec.savepoint_nonce,
            last_restart_nonce=self.spec.restart_nonce,
        )
        self.emit("Normal", "Upgrading", clip(f"Rolling out the changed spec ({fields}) with upgradeMode {mode.value}"))
        self.again(0)
        return True

    def start_suspend(self) -> None:
        if self.spec.savepoint is not None and self.spec.upgrade_mode is not UpgradeMode.stateless:
            op = Operation(kind=OpKind.suspend.value, phase=Phase.savepointing.value, savepoint_path=self.new_savepoint_path("suspend"),
                           trigger="suspend", restore_mode=RestoreMode.savepoint.value, started_at=self.t(),
                           deadline=self.t(self.spec.savepoint.timeout_seconds), message="suspending with a savepoint")
            self.update(last_savepoint_attempt_at=self.t())
            self.emit("Normal", "Suspending", f"Suspending: taking savepoint {op.savepoint_path}, then stopping the driver")
        else:
            op = Operation(kind=OpKind.suspend.value, phase=Phase.stopping.value, restore_mode=RestoreMode.last_state.value,
                           started_at=self.t(), message="suspending (no savepoint location: resume from the latest checkpoint)")
            self.emit("Normal", "Suspending", "Suspending: stopping the driver; resume continues from the latest checkpoint")
        self.update(operation=op, state=LifecycleState.suspending)
        self.again(0)

    def start_savepoint(self, trigger: str) -> None:
        self.update(last_savepoint_nonce=self.spec.savepoint_nonce)
        if self.spec.savepoint is None:
            self.emit("Warning", "SavepointSkipped", "No savepoint taken: spec.savepoint.location is not set")
            return
        path = self.new_savepoint_path(trigger)
        self.update(
            operation=Operation(kind=OpKind.savepoint.value, phase=Phase.savepointing.value, savepoint_path=path, trigger=trigger,
                                started_at=self.t(), deadline=self.t(self.spec.savepoint.timeout_seconds),
                                message=f"{trigger} savepoint"),
            last_savepoint_attempt_at=self.t(),
        )
        self.emit("Normal", "Savepointing", f"Taking a {trigger} savepoint to {path} while the job keeps running")
        self.again(0)

    def periodic_due(self) -> bool:
        sp = self.spec.savepoint
        if sp is None or not sp.periodic_interval or not self.job_ready():
            return False
        last = self.st.last_savepoint
        bases = [parse_time(x) for x in (last.time if last else None, self.st.last_savepoint_attempt_at, self.st.deployed_at)]
        known = [b for b in bases if b is not None]
        return not known or self.now >= max(known) + parse_duration(sp.periodic_interval)

    # --- with an operation -----------------------------------------------------------------
    def continue_operation(self) -> None:
        phase = self.op().phase
        if phase == Phase.savepointing.value:
            self.savepointing()
        elif phase == Phase.stopping.value:
            self.stopping()
        elif phase == Phase.waiting.value:
            self.waiting()
        elif phase == Phase.deploying.value:
            self.deploying()
        elif phase == Phase.awaiting_ready.value:
            self.awaiting_ready()
        else:  # an unknown phase (a newer operator wrote it?): start over from what is observed
            self.emit("Warning", "OperationAbandoned", f"Unknown operation phase {phase!r}; re-observing")
            self.update(operation=None, state=LifecycleState.running)
            self.again(0)

    def savepointing(self) -> None:
        op = self.op()
        cur = self.current
        manifest = self.obs.manifest if self.obs.manifest and self.obs.manifest.path == op.savepoint_path else None
        progress = self.obs.savepoint
        if manifest is not None or (progress is not None and progress.state is SavepointState.completed):
            self.savepoint_completed(manifest.batch_id if manifest else (progress.batch_id if progress else None))
            return
        why: str | None = None
        if progress is not None and progress.state is SavepointState.failed:
            why = progress.error or "the driver reported the savepoint failed"
        elif self.past(op.deadline):
            why = f"no complete savepoint (manifest) at {op.savepoint_path} by the deadline {op.deadline}"
        elif cur is None or cur.terminated or cur.deleting:
            code = f" (exit {cur.exit_code})" if cur is not None and cur.exit_code is not None else ""
            why = f"the driver stopped before the savepoint completed{code}"
        if why is not None:
            self.savepoint_failed(why)
            return
        if op.trigger_id is None:
            if self.running_driver() is not None and self.reachable():
                assert cur is not None and op.savepoint_path is not None
                self.actions.append(TriggerSavepoint(cur.name, op.savepoint_path, stop=op.kind != OpKind.savepoint.value))
        self.again(POLL_SECONDS)

    def savepoint_completed(self, batch_id: int | None) -> None:
        op = self.op()
        assert op.savepoint_path is not None
        info = SavepointInfo(path=op.savepoint_path, batch_id=batch_id, time=self.t(), trigger=op.trigger or op.kind)
        history = [info] + [h for h in self.st.savepoint_history if h.path != info.path]
        self.update(last_savepoint=info, savepoint_history=history[:MAX_SAVEPOINT_HISTORY])
        message = f"Savepoint {info.path} completed at batch {batch_id} ({info.trigger})"
        self.savepoint_result = ("SavepointCompleted", message)
        self.emit("Normal", "SavepointCompleted", message)
        if op.kind == OpKind.savepoint.value:
            self.update(operation=None)
        else:  # recorded before anything is deleted: the next pass stops the driver
            self.op_update(phase=Phase.stopping.value, trigger_id=None)
            self.again(0)

    def savepoint_failed(self, why: str) -> None:
        op = self.op()
        self.savepoint_result = ("SavepointFailed", clip(f"Savepoint {op.savepoint_path} failed: {why}"))
        self.emit("Warning", "SavepointFailed", f"Savepoint {op.savepoint_path} ({op.trigger or op.kind}) failed: {why}")
        self.update(last_error=clip(f"savepoint failed: {why}"))
        if op.kind == OpKind.delete.value:
            self.emit("Warning", "Deleting", "Deleting without a final savepoint")
            self.op_update(phase=Phase.stopping.value, trigger_id=None)
            self.again(0)
            return
        self.update(operation=None, state=LifecycleState.running)
        if op.kind in (OpKind.upgrade.value, OpKind.suspend.value):
            what = "upgrade" if op.kind == OpKind.upgrade.value else "suspend"
            message = (f"The {what} was not done because its savepoint failed ({why}); the running job was kept. "
                       "It is retried on the next spec change or savepointNonce.")
            self.block("SavepointFailed", message)
            self.emit("Warning", f"{what.capitalize()}Aborted", message)
        self.again(0)

    def stopping(self) -> None:
        op = self.op()
        pods = self.obs.drivers
        if pods:
            deadline = parse_time(op.deadline)
            force = op.kind == OpKind.delete.value and deadline is not None and self.now >= deadline
            if force and deadline is not None and self.now >= deadline + timedelta(seconds=FORCE_DELETE_GRACE_SECONDS):
                self.emit("Warning", "DeletionForced", f"Driver pods {[p.name for p in pods]} still present after the deadline; "
                          "finishing deletion, garbage collection removes them")
                self.finish_deletion()
                return
            for pod in pods:
                if not pod.deleting or force:
                    self.actions.append(DeleteDriver(pod.name, grace_seconds=0 if force else None))
            self.again(1)
            return
        kind = op.kind
        if kind == OpKind.suspend.value:
            self.update(operation=None, state=LifecycleState.suspended, driver_pod=None, ready=False)
            where = f" with savepoint {op.savepoint_path}" if op.savepoint_path else ""
            self.emit("Normal", "Suspended", f"Suspended{where}; set spec.state to running to resume")
        elif kind == OpKind.delete.value:
            self.finish_deletion()
        elif kind == OpKind.restart.value:
            if self.st.next_restart_at and not self.past(self.st.next_restart_at):
                self.op_update(phase=Phase.waiting.value)
                at = parse_time(self.st.next_restart_at)
                assert at is not None
                self.again(max(0.0, (at - self.now).total_seconds()))
            else:
                assert self.st.last_reconciled_spec is not None
                self.enter_deploying(op, self.st.last_reconciled_spec)
        elif kind == OpKind.rollback.value:
            assert self.st.last_stable_spec is not None
            self.enter_deploying(op, self.st.last_stable_spec)
        else:
            self.enter_deploying(op, spec_json(self.spec))

    def finish_deletion(self) -> None:
        self.deletion_done = True
        self.update(driver_pod=None, ready=False)
        self.op_update(phase=Phase.done.value)
        self.actions.append(DeleteOwnedObjects())
        self.emit("Normal", "Deleted", "Driver stopped and owned objects deleted; removing the finalizer")

    def waiting(self) -> None:
        if self.past(self.st.next_restart_at) or self.st.next_restart_at is None:
            assert self.st.last_reconciled_spec is not None
            self.enter_deploying(self.op(), self.st.last_reconciled_spec)
            return
        at = parse_time(self.st.next_restart_at)
        assert at is not None
        self.again(max(0.0, (at - self.now).total_seconds()))

    def enter_deploying(self, op: Operation, deploy_spec_json: str) -> None:
        """Records the next driver (epoch, name, checkpoint, restore source) and creates it."""
        if self.obs.drivers:  # never two drivers: stop what is there first
            self.update(operation=op.model_copy(update={"phase": Phase.stopping.value}))
            self.again(0)
            return
        deploy_spec = StreamJobSpec.model_validate(json.loads(deploy_spec_json))
        epoch = self.st.driver_epoch + 1
        mode = RestoreMode(op.restore_mode or RestoreMode.last_state.value)
        base = deploy_spec.checkpoint.location
        restored: str | None
        if mode is RestoreMode.savepoint and op.savepoint_path:
            checkpoint, restored = names.checkpoint_location(base, epoch), op.savepoint_path
            how = f"restoring savepoint {restored} into {checkpoint}"
        elif mode is RestoreMode.last_state and self.st.checkpoint_location:
            checkpoint, restored = self.st.checkpoint_location, self.st.restored_from
            batch = self.st.last_checkpoint.batch_id if self.st.last_checkpoint else None
            how = f"resuming checkpoint {checkpoint}{f' after batch {batch}' if batch is not None else ''}"
        else:
            checkpoint, restored = names.checkpoint_location(base, epoch), None
            how = f"with fresh state at {checkpoint}"
        pod = names.driver_pod(self.obs.name, epoch)
        self.update(
            driver_epoch=epoch,
            driver_pod=pod,
            checkpoint_location=checkpoint,
            restored_from=restored,
            deployed_at=self.t(),
            last_reconciled_spec=deploy_spec_json,
            operation=op.model_copy(update={"phase": Phase.deploying.value}),
            state=_STATE_OF_KIND[OpKind(op.kind)],
            ready=False,
            job=None,
        )
        self.actions.append(EnsureSupportObjects(deploy_spec.service_account_name))
        self.actions.append(self.create_driver())
        self.emit("Normal", "DriverCreated", f"Created driver pod {pod}, {how}")
        self.again(POLL_SECONDS)

    def create_driver(self) -> CreateDriver:
        st = self.st
        assert st.driver_pod and st.last_reconciled_spec and st.checkpoint_location
        return CreateDriver(
            pod=st.driver_pod,
            epoch=st.driver_epoch,
            spec_json=st.last_reconciled_spec,
            checkpoint_location=st.checkpoint_location,
            restore_from=st.restored_from,
            spec_hash=hash_text(st.last_reconciled_spec),
        )

    def deploying(self) -> None:
        op = self.op()
        cur = self.current
        if self.delete_strays():
            return
        if cur is None:  # recorded but not (yet) created, e.g. the operator died in between
            spec = StreamJobSpec.model_validate(json.loads(self.st.last_reconciled_spec or "{}"))
            self.actions.append(EnsureSupportObjects(spec.service_account_name))
            self.actions.append(self.create_driver())
            self.again(POLL_SECONDS)
            return
        if cur.terminated:
            self.exited_while_starting(cur)
            return
        if cur.phase is not PodPhase.running or cur.deleting:
            self.again(POLL_SECONDS)
            return
        kind = OpKind(op.kind)
        if kind is OpKind.upgrade and self.can_roll_back():
            self.op_update(phase=Phase.awaiting_ready.value, deadline=self.t(self.spec.rollback.readiness_timeout_seconds))
            self.again(POLL_SECONDS)
            return
        self.update(operation=None, state=LifecycleState.running, next_restart_at=None)
        if kind is OpKind.rollback:
            self.emit("Normal", "RolledBack", f"Driver {cur.name} runs the last stable spec again")
        elif kind is OpKind.upgrade:
            self.emit("Normal", "UpgradeCompleted", f"Driver {cur.name} runs the new spec")
            self.update(blocked_change=None)
        else:
            self.emit("Normal", "DriverStarted", f"Driver {cur.name} is running")
        self.again(POLL_SECONDS)

    def can_roll_back(self) -> bool:
        st = self.st
        return bool(self.spec.rollback.enabled and st.last_stable_spec and st.last_stable_spec != st.last_reconciled_spec)

    def exited_while_starting(self, pod: DriverPod) -> None:
        detail = f": {pod.message}" if pod.message else ""
        if self.op().kind == OpKind.upgrade.value and self.can_roll_back():
            self.start_rollback(f"the upgraded driver {pod.name} exited before becoming ready (exit {pod.exit_code}){detail}")
            return
        self.update(operation=None, state=LifecycleState.running)  # the next pass applies the restart policy
        self.again(0)

    def awaiting_ready(self) -> None:
        op = self.op()
        cur = self.current
        if self.job_ready():
            assert cur is not None
            self.update(operation=None, state=LifecycleState.running, last_stable_spec=self.st.last_reconciled_spec, blocked_change=None)
            self.emit("Normal", "UpgradeCompleted", f"Driver {cur.name} runs the new spec and completed a batch; it is the new stable spec")
            return
        if cur is not None and cur.terminated:
            self.exited_while_starting(cur)
            return
        if cur is None or self.past(op.deadline):
            self.start_rollback(
                f"the upgraded job did not become ready within spec.rollback.readinessTimeoutSeconds="
                f"{self.spec.rollback.readiness_timeout_seconds}s"
            )
            return
        self.again(POLL_SECONDS)

    def start_rollback(self, why: str) -> None:
        op = self.op()
        self.block("RolledBack", f"Rolled back: {why}. The change is retried on the next spec change or nonce.")
        path = op.savepoint_path if op.restore_mode == RestoreMode.savepoint.value else None
        assert self.st.last_stable_spec is not None
        self.update(
            operation=Operation(kind=OpKind.rollback.value, phase=Phase.stopping.value, target_spec_hash=hash_text(self.st.last_stable_spec),
                                savepoint_path=path, restore_mode=op.restore_mode, started_at=self.t(), message=clip(why)),
            state=LifecycleState.rolling_back,
            last_error=clip(why),
        )
        self.emit("Warning", "RollingBack",
                  f"{why}; rolling back to the last stable spec{f' from savepoint {path}' if path else ''}")
        self.again(0)

    # --- deletion ---------------------------------------------------------------------------
    def deletion(self) -> None:
        op = self.st.operation
        if op is not None and op.kind == OpKind.delete.value:
            if op.phase == Phase.done.value:
                self.deletion_done = True
                return
            self.continue_operation()
            return
        deadline = self.t(self.spec.deletion.timeout_seconds)
        wants = self.spec.deletion.savepoint_on_delete and self.spec.savepoint is not None
        can = wants and self.running_driver() is not None and self.reachable() and self.st.state is not LifecycleState.failed
        if can:
            new = Operation(kind=OpKind.delete.value, phase=Phase.savepointing.value, savepoint_path=self.new_savepoint_path("delete"),
                            trigger="delete", started_at=self.t(), deadline=deadline, message="final savepoint before deletion")
            self.update(last_savepoint_attempt_at=self.t())
            self.emit("Normal", "Deleting", f"Deleting: taking a final savepoint to {new.savepoint_path} (at most {self.spec.deletion.timeout_seconds}s)")
        else:
            new = Operation(kind=OpKind.delete.value, phase=Phase.stopping.value, started_at=self.t(), deadline=deadline, message="deleting")
            note = "; savepointOnDelete is set but the job is not running, so no final savepoint" if wants else ""
            self.emit("Normal", "Deleting", f"Deleting: stopping the driver{note}")
        if op is not None:
            self.emit("Warning", "OperationAbandoned", f"Abandoned {op.kind} ({op.phase}) for deletion")
        self.update(operation=new, state=LifecycleState.deleting)
        self.again(0)

    # --- retention ------------------------------------------------------------------------------
    def retention(self) -> None:
        sp = self.spec.savepoint
        history = self.st.savepoint_history
        if sp is None or not history:
            return
        op = self.st.operation
        protected = {history[0].path, self.st.restored_from, op.savepoint_path if op else None}
        max_age = parse_duration(sp.retention.max_age) if sp.retention.max_age else None
        keep, drop = [], []
        for i, info in enumerate(history):
            taken = parse_time(info.time)
            too_old = max_age is not None and taken is not None and self.now - taken > max_age
            if (i >= sp.retention.count or too_old) and info.path not in protected:
                drop.append(info)
            else:
                keep.append(info)
        if not drop:
            return
        self.update(savepoint_history=keep)
        for info in drop:
            self.actions.append(DeleteSavepoint(info.path))
        self.emit("Normal", "SavepointsPruned",
                  f"Pruned {len(drop)} savepoint(s) beyond retention (count {sp.retention.count}"
                  f"{f', maxAge {sp.retention.max_age}' if sp.retention.max_age else ''}): {', '.join(i.path for i in drop)}")

    # --- conditions -------------------------------------------------------------------------------
    def conditions(self) -> None:
        st = self.st
        op = st.operation
        ready = self.job_ready() and st.state not in (LifecycleState.deleting, LifecycleState.suspended, LifecycleState.failed)
        if ready and not self.before.ready:
            batch = st.last_checkpoint.batch_id if st.last_checkpoint else None
            self.emit("Normal", "JobReady", f"Driver {st.driver_pod} is running and completed batch {batch}")
        elif not ready and self.before.ready and st.state is LifecycleState.running and op is None:
            self.emit("Warning", "JobNotReady", f"Driver {st.driver_pod} is no longer ready")
        self.update(ready=ready)

        state = st.state.value if st.state else "Pending"
        if ready:
            self.condition("Ready", "True", "Running", f"Driver {st.driver_pod} is running and completing batches")
        else:
            self.condition("Ready", "False", state if st.state is not LifecycleState.running else "Starting",
                           st.last_error if st.state is LifecycleState.failed and st.last_error else f"The job is {state}")

        if op is not None:
            self.condition("Progressing", "True", _PROGRESS_REASON.get(OpKind(op.kind), "Progressing"),
                           f"{op.kind} {op.phase}: {op.message}" if op.message else f"{op.kind} {op.phase}")
        elif st.blocked_change is not None:
            self.condition("Progressing", "False", st.blocked_change.reason, st.blocked_change.message)
        else:
            self.condition("Progressing", "False", "Reconciled", f"Generation {self.obs.generation} is rolled out")

        existing = self.find("Degraded")
        if st.state is LifecycleState.failed:
            if self.failure is not None:
                self.condition("Degraded", "True", *self.failure)
            elif existing is None or existing.status != "True":
                self.condition("Degraded", "True", "Failed", st.last_error or "The job failed")
            else:
                self.condition("Degraded", "True", existing.reason, existing.message)
        elif st.blocked_change is not None:
            self.condition("Degraded", "True", st.blocked_change.reason, st.blocked_change.message)
        elif st.restart_count > 0 and not ready:
            self.condition("Degraded", "True", "DriverFailed", st.last_error or "The driver failed and is being restarted")
        else:
            self.condition("Degraded", "False", "AsExpected", "")

        if op is not None and op.phase == Phase.savepointing.value:
            self.condition("Savepointing", "True", "InProgress", f"Savepoint {op.savepoint_path} ({op.trigger or op.kind}) in progress")
        elif self.savepoint_result is not None:
            self.condition("Savepointing", "False", *self.savepoint_result)
        else:
            prior = self.find("Savepointing")
            if prior is None or prior.status == "True":
                self.condition("Savepointing", "False", "Idle", "No savepoint in progress")
            else:
                self.condition("Savepointing", "False", prior.reason, prior.message)

    def find(self, type_: str) -> Condition | None:
        return next((c for c in self.st.conditions if c.type == type_), None)

    def condition(self, type_: str, status: str, reason: str, message: str) -> None:
        prior = self.find(type_)
        changed = prior is None or prior.status != status
        new = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=clip(message),
            observed_generation=self.obs.generation,
            last_transition_time=self.t() if changed or prior is None else prior.last_transition_time,
        )
        others = [c for c in self.st.conditions if c.type != type_]
        order = ["Ready", "Progressing", "Degraded", "Savepointing"]
        merged = sorted(others + [new], key=lambda c: order.index(c.type) if c.type in order else len(order))
        self.update(conditions=merged)
