"""Truth tables of reconcile.decide for warm-standby upgrades (spec.standby, issue 25 section 1).

The new driver starts (phase Standby) while the old one runs; a standby that is not ready, or is
never released, is deleted and the old driver keeps running with the change not applied; a ready
one is released only after the old driver stopped with a savepoint and is gone. The last tests
walk whole upgrades pass by pass in a simulated world, with the operator killed at every step
(the pass's status written, its actions lost), and check that two drivers never run a query.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from test_decide import (
    NOW,
    READY,
    UPGRADE_SP,
    Expect,
    at,
    check,
    failed,
    hash_text,
    make_spec,
    obs,
    pod,
    running,
    spec_hash,
    spec_json,
    with_op,
)

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_contract.runtime_status import RunState, RuntimeStatus
from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import (
    CreateDriver,
    DeleteDriver,
    EnsureSupportObjects,
    JobProgress,
    Observations,
    PodPhase,
    ReleaseStandby,
    SavepointManifest,
    TriggerSavepoint,
)

CK = "s3a://streamjob/checkpoints/wc"
ON = {"standby": {"enabled": True, "readyTimeoutSeconds": 120}}
OLD = make_spec(**ON)
NEW = make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0", **ON)
OLD_JSON, NEW_JSON = spec_json(OLD), spec_json(NEW)
STANDBY = "wc-driver-2"
STANDBY_READY = JobProgress(RuntimeStatus(state=RunState.STANDBY))
STANDBY_STARTING = JobProgress(RuntimeStatus(state=RunState.STARTING))
RESTORING = JobProgress(RuntimeStatus(state=RunState.RESTORING))


def base() -> StreamJobStatus:
    return running(OLD)


def in_standby(**op: Any) -> StreamJobStatus:
    """The upgrade recorded its standby (epoch 2 reserved) while wc-driver-1 runs."""
    fields: dict[str, Any] = dict(kind="upgrade", phase="Standby", target_spec_hash=spec_hash(NEW), target_spec=NEW_JSON,
                                  restore_mode="savepoint", standby_pod=STANDBY, deadline=at(120))
    fields.update(op)
    return with_op(running(OLD, state=LifecycleState.upgrading, driver_epoch=2), **fields)


def released(**op: Any) -> StreamJobStatus:
    """The standby was recorded as the driver and asked to restore the upgrade savepoint."""
    fields: dict[str, Any] = dict(kind="upgrade", phase="Releasing", target_spec_hash=spec_hash(NEW), target_spec=NEW_JSON,
                                  restore_mode="savepoint", standby_pod=STANDBY, savepoint_path=UPGRADE_SP, trigger="upgrade",
                                  deadline=at(300))
    fields.update(op)
    status = running(OLD, state=LifecycleState.upgrading, driver_epoch=2, driver_pod=STANDBY, ready=False,
                     last_reconciled_spec=NEW_JSON, restored_from=UPGRADE_SP)
    return with_op(status, **fields)


STANDBY_CREATE = CreateDriver(STANDBY, 2, NEW_JSON, f"{CK}/wc-1234abcd/run-2", None, hash_text(NEW_JSON),
                              standby=True, keep_epoch=None)
BLOCKED = {"Degraded": ("True", "StandbyFailed")}

CASES = [
    # --- starting the standby -----------------------------------------------------------
    pytest.param(
        NEW, base(), obs(pod()),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Standby"),
               actions=[EnsureSupportObjects(None), STANDBY_CREATE], events=["Upgrading", "StandbyCreated"],
               status={"driver_pod": "wc-driver-1", "driver_epoch": 2, "last_reconciled_spec": OLD_JSON},
               status_op={"standby_pod": STANDBY, "savepoint_path": None, "deadline": at(120)}),
        id="a changed spec with spec.standby starts a standby next to the running driver, which is not touched",
    ),
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0"), running(), obs(pod()),
        Expect(op=("upgrade", "Savepointing"), actions=[], events=["Upgrading"]),
        id="without spec.standby an upgrade starts with the savepoint (cold, as before)",
    ),
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0", upgradeMode="last-state", **ON),
        running(make_spec(upgradeMode="last-state", **ON)), obs(pod()),
        Expect(op=("upgrade", "Stopping")),
        id="a last-state upgrade takes no standby: there is no savepoint to hand over",
    ),
    pytest.param(
        NEW, running(OLD, ready=False), obs(pod(phase=PodPhase.pending), job=None),
        Expect(op=("upgrade", "Savepointing")),
        id="with no running driver to keep, the upgrade is cold",
    ),
    # --- waiting for it ------------------------------------------------------------------
    pytest.param(
        NEW, in_standby(), obs(pod(), pod(STANDBY, PodPhase.pending)),
        Expect(op=("upgrade", "Standby"), actions=[], requeue=2.0),
        id="a standby pod that is pending is waited for",
    ),
    pytest.param(
        NEW, in_standby(), obs(pod(), pod(STANDBY), standby=STANDBY_STARTING),
        Expect(op=("upgrade", "Standby"), actions=[], requeue=2.0),
        id="a standby still starting its session is waited for",
    ),
    pytest.param(
        NEW, in_standby(), obs(pod()),
        Expect(op=("upgrade", "Standby"),
               actions=[EnsureSupportObjects(None), CreateDriver(STANDBY, 2, NEW_JSON, f"{CK}/wc-1234abcd/run-2", None,
                                                                 hash_text(NEW_JSON), standby=True, keep_epoch=None)]),
        id="a recorded standby that was never created (operator killed) is created again, same name and epoch",
    ),
    pytest.param(
        NEW, in_standby(), obs(pod(), pod(STANDBY), standby=STANDBY_READY),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Savepointing"), actions=[], events=["StandbyReady"],
               status_op={"trigger": "upgrade", "standby_pod": STANDBY}),
        id="a ready standby: the old driver is stopped with a savepoint next",
    ),
    # --- a standby that never becomes ready: no downtime, the change not applied ---------------
    pytest.param(
        NEW, in_standby(), obs(pod(), pod(STANDBY, PodPhase.pending, waiting_reason="ImagePullBackOff",
                                         message="ImagePullBackOff: Back-off pulling image")),
        Expect(state=LifecycleState.running, op=None, actions=[DeleteDriver(STANDBY)], events=["StandbyFailed"],
               status={"driver_pod": "wc-driver-1", "last_reconciled_spec": OLD_JSON}, conditions=BLOCKED),
        id="a standby whose image cannot be pulled is deleted; the old driver runs on; Degraded StandbyFailed",
    ),
    pytest.param(
        NEW, in_standby(), obs(pod(), failed(STANDBY, 12, ExitCode.INVALID_JOB, "job.pipeline: the query cannot start")),
        Expect(state=LifecycleState.running, op=None, actions=[DeleteDriver(STANDBY)], events=["StandbyFailed"],
               status={"driver_pod": "wc-driver-1", "last_reconciled_spec": OLD_JSON}, conditions=BLOCKED),
        id="a standby that exits at start (plan error, crash) is deleted; the old driver runs on",
    ),
    pytest.param(
        NEW, in_standby(deadline=at(-1)), obs(pod(), pod(STANDBY), standby=STANDBY_STARTING),
        Expect(state=LifecycleState.running, op=None, actions=[DeleteDriver(STANDBY)], events=["StandbyFailed"],
               conditions=BLOCKED),
        id="a standby not ready by spec.standby.readyTimeoutSeconds is deleted",
    ),
    pytest.param(
        NEW, in_standby(deadline=at(-1)), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["StandbyFailed"], conditions=BLOCKED),
        id="a standby that could not be created by the deadline fails the same way",
    ),
    pytest.param(
        NEW, running(OLD, driver_epoch=2, blocked_change=None).model_copy(update={"blocked_change": None}),
        obs(pod(), pod(STANDBY, PodPhase.pending)),
        Expect(op=None, actions=[DeleteDriver(STANDBY)], events=["StrayDriverDeleted"]),
        id="a standby that no operation names (its operation ended, the operator died) is deleted as a stray",
    ),
    # --- never released: deleted, the old job keeps running ----------------------------------
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.3.0", **ON), in_standby(), obs(pod(), pod(STANDBY)),
        Expect(state=LifecycleState.running, op=None, actions=[DeleteDriver(STANDBY)], events=["StandbyAbandoned"]),
        id="the spec changed again while the standby started: it is deleted, the newer spec rolls out next",
    ),
    pytest.param(
        NEW, in_standby(), obs(failed("wc-driver-1"), pod(STANDBY), job=None, standby=STANDBY_READY),
        Expect(state=LifecycleState.running, op=None, actions=[DeleteDriver(STANDBY)], events=["StandbyAbandoned", "JobNotReady"]),
        id="the old driver failed while the standby started: the standby is deleted, the restart policy takes over",
    ),
    pytest.param(
        NEW, in_standby(phase="Savepointing", savepoint_path=UPGRADE_SP, trigger="upgrade", trigger_id="t", deadline=at(-1)),
        obs(pod(), pod(STANDBY), standby=STANDBY_READY),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["SavepointFailed", "UpgradeAborted"],
               status={"driver_pod": "wc-driver-1"}),
        id="the savepoint failed: the upgrade ends, the old driver runs on (its standby is a stray next pass)",
    ),
    # --- stopping the old driver, releasing the standby ----------------------------------------
    pytest.param(
        NEW, in_standby(phase="Stopping", savepoint_path=UPGRADE_SP, trigger="upgrade"),
        obs(failed("wc-driver-1", 10, ExitCode.STOPPED_FOR_SAVEPOINT, ""), pod(STANDBY), job=None, standby=STANDBY_READY),
        Expect(op=("upgrade", "Stopping"), actions=[DeleteDriver("wc-driver-1")]),
        id="stopping deletes the old driver and spares the standby",
    ),
    pytest.param(
        NEW, in_standby(phase="Stopping", savepoint_path=UPGRADE_SP, trigger="upgrade"),
        obs(pod(STANDBY), job=None, standby=STANDBY_READY),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Releasing"), actions=[ReleaseStandby(STANDBY, UPGRADE_SP)],
               events=["StandbyReleased"],
               status={"driver_pod": STANDBY, "driver_epoch": 2, "restored_from": UPGRADE_SP,
                       "checkpoint_location": f"{CK}/wc-1234abcd/run-2", "last_reconciled_spec": NEW_JSON}),
        id="the old driver is gone: the standby is recorded as the driver, then released with the savepoint",
    ),
    pytest.param(
        NEW, in_standby(phase="Stopping", savepoint_path=UPGRADE_SP, trigger="upgrade"),
        obs(failed(STANDBY, 1, ExitCode.FAILED, "OutOfMemoryError"), job=None),
        Expect(op=("upgrade", "Stopping"), actions=[], events=["StandbyLost"], status_op={"standby_pod": None}),
        id="a standby that died meanwhile is not released: it is stopped and the new spec deployed cold",
    ),
    pytest.param(
        NEW, released(), obs(pod(STANDBY), job=JobProgress(RuntimeStatus(state=RunState.STANDBY))),
        Expect(op=("upgrade", "Releasing"), actions=[ReleaseStandby(STANDBY, UPGRADE_SP)], requeue=2.0),
        id="a standby still in STANDBY is asked again (the release may have been lost with the operator)",
    ),
    pytest.param(
        NEW, released(), obs(pod(STANDBY), job=RESTORING),
        Expect(op=("upgrade", "AwaitingReady"), actions=[]),
        id="a released standby that restores is an upgraded driver awaiting its first batch",
    ),
    pytest.param(
        NEW, released(phase="AwaitingReady"), obs(pod(STANDBY), job=READY),
        Expect(state=LifecycleState.running, op=None, events=["UpgradeCompleted", "JobReady"],
               status={"last_stable_spec": NEW_JSON, "driver_pod": STANDBY}),
        id="its first batch completes the upgrade",
    ),
    pytest.param(
        NEW, released(), obs(failed(STANDBY, 13, ExitCode.RESTORE_REFUSED, "savepoint refused"), job=None),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"],
               status={"driver_pod": STANDBY}),
        id="a released standby that fails is rolled back from the savepoint, as a cold upgrade",
    ),
]


@pytest.mark.parametrize(("spec", "status", "observations", "expect"), CASES)
def test_decide_standby(spec: StreamJobSpec, status: StreamJobStatus, observations: Observations, expect: Expect) -> None:
    check(decide(spec, status, observations, NOW), expect)


class World:
    """Driver pods as the actions leave them: a standby runs no query until released, a stop-with-savepoint
    exits the old driver; ``querying`` is who runs a query."""

    def __init__(self, standby_fails: bool = False) -> None:
        self.pods: dict[str, str] = {"wc-driver-1": "running"}  # running | standby | starting | exited
        self.manifest: SavepointManifest | None = None
        self.standby_fails = standby_fails
        self.asked: set[str] = set()  # savepoint request ids the driver received

    def querying(self) -> list[str]:
        return [name for name, state in self.pods.items() if state == "running"]

    def observe(self) -> Observations:
        drivers = []
        standby: JobProgress | None = None
        job: JobProgress | None = None
        for name, state in self.pods.items():
            if state == "exited":
                drivers.append(failed(name, 10, ExitCode.STOPPED_FOR_SAVEPOINT, ""))
            elif state == "broken":
                drivers.append(pod(name, PodPhase.pending, waiting_reason="ErrImagePull", message="ErrImagePull: not found"))
            else:
                drivers.append(pod(name))
        return obs(*drivers, job=job, standby=standby, manifest=self.manifest)

    def act(self, actions: tuple[Any, ...]) -> None:
        for action in actions:
            if isinstance(action, CreateDriver):
                assert not self.querying() or action.standby, "a driver was created while another runs a query"
                self.pods[action.pod] = "broken" if self.standby_fails else ("standby" if action.standby else "running")
            elif isinstance(action, TriggerSavepoint):
                self.asked.add(action.trigger_id or "")
                self.pods[action.pod] = "exited"
                self.manifest = SavepointManifest(action.path, batch_id=42)
            elif isinstance(action, DeleteDriver):
                self.pods.pop(action.pod, None)
            elif isinstance(action, ReleaseStandby):
                assert not self.querying(), f"standby released while {self.querying()} runs a query"
                assert self.pods.get(action.pod) in ("standby", "running")
                self.pods[action.pod] = "running"
            assert len(self.querying()) <= 1


def observed(world: World, status: StreamJobStatus) -> Observations:
    """What observe reads: the current driver's /status, and the standby's."""
    o = world.observe()
    op = status.operation
    cur = world.pods.get(status.driver_pod or "")
    job = READY if cur == "running" else (JobProgress(RuntimeStatus(state=RunState.STANDBY)) if cur == "standby" else None)
    sb = world.pods.get(op.standby_pod) if op is not None and op.standby_pod and op.standby_pod != status.driver_pod else None
    standby = JobProgress(RuntimeStatus(state=RunState.STANDBY)) if sb == "standby" else None
    unknown = bool(op is not None and op.trigger_id and op.trigger_id not in world.asked and cur == "running")
    return Observations(name=o.name, namespace=o.namespace, uid=o.uid, generation=o.generation, drivers=o.drivers,
                        job=job, standby=standby, manifest=o.manifest, savepoint_unknown=unknown)


def converge(world: World, kill_at: int | None = None, passes: int = 30) -> StreamJobStatus:
    """Passes until the operation ends; at pass ``kill_at`` the operator dies after writing status, before acting."""
    status = running(OLD)
    now = NOW
    for n in range(passes):
        decision = decide(NEW, status, observed(world, status), now)
        status = decision.status
        if n != kill_at:
            world.act(decision.actions)
        now += timedelta(seconds=1)
        if status.operation is None and n > 0 and (status.last_stable_spec == NEW_JSON or status.blocked_change is not None):
            break
    return status


@pytest.mark.parametrize("kill_at", [None, *range(0, 9)])
def test_a_standby_upgrade_converges_and_never_runs_two_queries(kill_at: int | None) -> None:
    world = World()
    status = converge(world, kill_at)
    assert status.operation is None and status.last_stable_spec == NEW_JSON, status
    assert status.driver_pod == STANDBY and list(world.pods) == [STANDBY] and world.querying() == [STANDBY]
    assert status.restored_from == world.manifest.path if world.manifest else False
    assert json.loads(status.last_reconciled_spec or "{}")["image"].endswith(":0.2.0")


@pytest.mark.parametrize("kill_at", [None, 0, 1, 2])
def test_a_standby_that_cannot_start_leaves_the_old_driver_alone(kill_at: int | None) -> None:
    world = World(standby_fails=True)
    status = converge(world, kill_at)
    assert status.operation is None and status.blocked_change is not None
    assert status.blocked_change.reason == "StandbyFailed"
    assert status.driver_pod == "wc-driver-1" and world.querying() == ["wc-driver-1"]
    assert status.last_reconciled_spec == OLD_JSON
    assert world.manifest is None, "no savepoint was taken: the old driver was never stopped"
    # the standby is gone, now or (as a stray) on the next pass
    later = decide(NEW, status, observed(world, status), NOW + timedelta(seconds=60))
    world.act(later.actions)
    assert list(world.pods) == ["wc-driver-1"]
    assert later.status.operation is None, "a blocked change is not retried until the spec changes"
