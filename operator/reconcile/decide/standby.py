"""Warm-standby upgrades (spec.standby.enabled): the new driver starts before the old one stops.

Pure. ``upgrade.start_change`` calls ``start`` for a running job whose change is rolled out with a
savepoint; ``flow`` calls ``waiting`` (phase Standby) and ``releasing`` (phase Releasing);
``upgrade.after_stopping`` calls ``release`` once the old driver is gone. The story, each step
recorded in status before it is acted on::

    Standby      the standby pod (epoch reserved in status.driverEpoch, name in operation.standbyPod)
                 starts with --standby: session, executors, the job checked; it reports STANDBY and
                 touches no checkpoint, source or output, nor the epoch (that would fence the old driver)
    Savepointing the old driver stops with a savepoint (savepoint.savepointing, as a cold upgrade)
    Stopping     the old driver is deleted, the standby spared (stopping.stopping)
    Releasing    status names the standby the driver, then POST /release with the savepoint: it
                 restores, claims the checkpoint, takes the epoch and starts; then AwaitingReady
                 as a cold upgrade (rollback included)

Never two drivers running a query: the standby runs none until it is released, and it is released
only after the old driver is gone. A standby that is never released (it does not become ready, the
savepoint fails, the spec changes again, the old driver is lost, the operator dies) is deleted: by
``failed`` or ``abandon`` here, or as a stray (``strays.delete_strays``) once no operation names it.
"""

from __future__ import annotations

import json

from streamjob_contract.lifecycle import LifecycleState
from streamjob_contract.runtime_status import RunState
from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import CheckpointInfo, Operation, Phase

from .. import names
from ..model import CreateDriver, DeleteDriver, DriverPod, EnsureSupportObjects, ReleaseStandby
from . import lineage, rollout
from .context import POLL_SECONDS, Pass, Steps, clip, hash_text, spec_hash
from .strays import delete_strays

# waiting reasons of a standby that will not start without a change: failed at once, the old driver keeps running
NOT_STARTING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                "CreateContainerError", "RunContainerError", "CrashLoopBackOff")


def wanted(p: Pass) -> bool:
    """A change rolled out with a savepoint goes through a standby when the spec asks and a driver runs."""
    return p.spec.standby.enabled and p.running_driver() is not None


def start(p: Pass, op: Operation) -> None:
    """Records the standby (its epoch reserved, so a failed one's name is never reused) and creates it."""
    assert op.target_spec is not None
    target = StreamJobSpec.model_validate(json.loads(op.target_spec))
    epoch = p.st.driver_epoch + 1
    pod = names.driver_pod(p.obs.name, epoch)
    p.update(
        driver_epoch=epoch,
        operation=op.model_copy(update={"phase": Phase.standby, "standby_pod": pod,
                                        "deadline": p.t(p.spec.standby.ready_timeout_seconds)}),
        state=LifecycleState.upgrading,
    )
    p.actions.append(EnsureSupportObjects(target.service_account_name))
    p.actions.append(standby_driver(p, target, epoch, pod, op.target_spec))
    p.emit("Normal", "StandbyCreated", f"Created standby driver pod {pod}; driver {p.st.driver_pod} keeps running until it is ready")
    p.again(POLL_SECONDS)


def standby_driver(p: Pass, target: StreamJobSpec, epoch: int, pod: str, target_json: str) -> CreateDriver:
    running = p.current.epoch if p.current is not None else None
    return CreateDriver(
        pod=pod, epoch=epoch, spec_json=target_json,
        checkpoint_location=names.checkpoint_location(target.checkpoint.location, p.obs.name, p.obs.uid, epoch),
        spec_hash=hash_text(target_json), standby=True, keep_epoch=running,
    )


def the_standby(p: Pass) -> DriverPod | None:
    op = p.op()
    return next((pod for pod in p.obs.drivers if pod.name == op.standby_pod), None)


def waiting(p: Pass) -> None:
    """Phase Standby: wait for the standby to report STANDBY, then stop the old driver with a savepoint."""
    op = p.op()
    pod = the_standby(p)
    if op.target_spec_hash != spec_hash(p.spec):
        abandon(p, "the spec changed again while it started; the new spec is rolled out next")
        return
    if p.running_driver() is None:
        abandon(p, f"driver {p.st.driver_pod} stopped running while the standby started")
        return
    if pod is None:  # recorded, not (yet) created: the operator died in between, or the API refused it
        if p.past(op.deadline):
            failed(p, f"could not be created by {op.deadline}")
            return
        assert op.target_spec is not None and op.standby_pod is not None
        target = StreamJobSpec.model_validate(json.loads(op.target_spec))
        p.actions.append(EnsureSupportObjects(target.service_account_name))
        p.actions.append(standby_driver(p, target, p.st.driver_epoch, op.standby_pod, op.target_spec))
        p.again(POLL_SECONDS)
        return
    if pod.terminated:
        failed(p, f"exited before it was ready (exit {pod.exit_code}){f': {pod.message}' if pod.message else ''}")
        return
    if pod.waiting_reason in NOT_STARTING:
        failed(p, f"does not start: {pod.message or pod.waiting_reason}")
        return
    progress = p.obs.standby
    if progress is not None and progress.runtime is not None and progress.runtime.state is RunState.STANDBY:
        assert p.spec.savepoint is not None  # standby upgrades are savepoint upgrades
        p.op_update(phase=Phase.savepointing, savepoint_path=p.new_savepoint_path("upgrade"), trigger="upgrade",
                    deadline=p.t(p.spec.savepoint.timeout_seconds))
        p.update(last_savepoint_attempt_at=p.t())
        p.emit("Normal", "StandbyReady", f"Standby driver {pod.name} is ready; stopping driver {p.st.driver_pod} with a savepoint")
        p.again(0)
        return
    if p.past(op.deadline):
        state = progress.runtime.state.value if progress is not None and progress.runtime and progress.runtime.state else None
        failed(p, f"was not ready within spec.standby.readyTimeoutSeconds={p.spec.standby.ready_timeout_seconds}s "
                  f"({f'state {state}' if state else pod.message or f'pod {pod.phase.value}'})")
        return
    p.again(POLL_SECONDS)


def failed(p: Pass, why: str) -> None:
    """The standby will not take over: it is deleted, the change is not applied, the old driver runs on."""
    op = p.op()
    message = (f"Not upgraded: the standby driver {op.standby_pod} {why}. Driver {p.st.driver_pod} keeps running the "
               "last reconciled spec; the change is retried on the next spec change or nonce")
    p.block("StandbyFailed", message, op.target_spec_hash)
    p.emit("Warning", "StandbyFailed", message)
    end(p, clip(message))


def abandon(p: Pass, why: str) -> None:
    p.emit("Normal", "StandbyAbandoned", f"Deleted standby driver {p.op().standby_pod}: {why}")
    end(p, None)


def end(p: Pass, error: str | None) -> None:
    pod = the_standby(p)
    if pod is not None and not pod.deleting:
        p.actions.append(DeleteDriver(pod.name))
    changes: dict[str, object] = {"operation": None, "state": LifecycleState.running}
    if error is not None:
        changes["last_error"] = error
    p.update(**changes)
    p.again(POLL_SECONDS)


def release(p: Pass) -> None:
    """The old driver is gone (stopped with the savepoint): the standby becomes the driver, recorded before it is
    released. A standby that is not ready any more is deleted and the target deployed cold, as without one."""
    op = p.op()
    pod = the_standby(p)
    ready = p.obs.standby is None or (p.obs.standby.runtime is not None and p.obs.standby.runtime.state is RunState.STANDBY)
    if pod is None or not pod.alive or not ready or op.savepoint_path is None or lineage.restore_behind(p, op) is not None:
        p.emit("Warning", "StandbyLost", f"Standby driver {op.standby_pod} cannot take over; deploying the new spec without it")
        p.op_update(standby_pod=None)
        rollout.deploy_target(p)  # stops what is left first (the standby), then deploys as a cold upgrade
        return
    assert op.target_spec is not None
    target = StreamJobSpec.model_validate(json.loads(op.target_spec))
    saved = lineage.savepoint_batch(p, op.savepoint_path)
    if saved is not None:  # the standby's checkpoint starts at the savepoint's batch
        p.update(last_checkpoint=CheckpointInfo(batch_id=saved, time=p.t()))
    p.update(
        driver_pod=pod.name,
        checkpoint_location=names.checkpoint_location(target.checkpoint.location, p.obs.name, p.obs.uid, p.st.driver_epoch),
        restored_from=op.savepoint_path,
        deployed_at=p.t(),
        last_reconciled_spec=op.target_spec,
        operation=op.model_copy(update={"phase": Phase.releasing, "deadline": p.t(target.rollback.readiness_timeout_seconds)}),
        ready=False,
        job=None,
    )
    p.actions.append(ReleaseStandby(pod.name, op.savepoint_path))
    p.emit("Normal", "StandbyReleased", f"Released standby driver {pod.name} to restore savepoint {op.savepoint_path}")
    p.again(POLL_SECONDS)


def releasing(p: Pass, steps: Steps) -> None:
    """Phase Releasing: the release is asked again until the driver says it left STANDBY (a retried release does
    nothing twice); from then on it is a started upgraded driver (AwaitingReady, or rolled back)."""
    op = p.op()
    cur = p.current
    if delete_strays(p):
        return
    if cur is None:
        steps.not_started(p, f"driver pod {p.st.driver_pod} is gone")
        return
    if cur.terminated:
        steps.exited_while_starting(p, cur)
        return
    runtime = p.obs.job.runtime if p.obs.job is not None else None
    if runtime is not None and runtime.state not in (None, RunState.STANDBY):
        steps.started(p, cur)
        return
    if p.past(op.deadline):
        steps.not_started(p, f"driver pod {cur.name} did not leave STANDBY by {op.deadline}")
        return
    if cur.alive and op.savepoint_path is not None:
        p.actions.append(ReleaseStandby(cur.name, op.savepoint_path))
    p.again(POLL_SECONDS)
