"""Truth tables of reconcile.decide: (spec, status, observations, now) -> actions, next status, events."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RunState, RuntimeStatus, SavepointState
from streamjob_operator.api.spec import StreamJobSpec, parse_spec
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import (
    BlockedChange,
    CheckpointInfo,
    Operation,
    SavepointInfo,
    StreamJobStatus,
)
from streamjob_operator.reconcile.decide import decide, hash_text, spec_hash, spec_json
from streamjob_operator.reconcile.decide.savepoint import request_id
from streamjob_operator.reconcile.model import (
    CreateDriver,
    Decision,
    DeleteDriver,
    DeleteOwnedObjects,
    DeleteSavepoint,
    DriverPod,
    EnsureSupportObjects,
    JobProgress,
    Observations,
    PodPhase,
    SavepointManifest,
    SavepointProgress,
    TriggerSavepoint,
    is_disruptive,
)
from streamjob_operator.reconcile.policy import fmt_time

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
T0 = fmt_time(NOW)
SP_BASE = "s3://streamjob/savepoints/ns/wc"
CK = "s3a://streamjob/checkpoints/wc"
UID = "1234abcd-5678-90ef-1234-567890abcdef"


def fresh(epoch: int) -> str:
    """The checkpoint location decide creates for a new seeded state: under the job's own name-uid directory."""
    return f"{CK}/wc-1234abcd/run-{epoch}"


def at(seconds: float) -> str:
    return fmt_time(NOW + timedelta(seconds=seconds))


def make_spec(**over: Any) -> StreamJobSpec:
    data: dict[str, Any] = {
        "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
        "job": {"entrypoint": "jobs.wordcount:build"},
        "checkpoint": {"location": CK},
        "savepoint": {"location": "s3://streamjob/savepoints"},
        "s3": {"endpoint": "http://127.0.0.1:9000", "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
        "restartPolicy": {"type": "ExponentialBackoff", "delaySeconds": 10, "maxDelaySeconds": 60, "maxRestarts": 3},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return parse_spec(data)


BASE = make_spec()


def running(spec: StreamJobSpec = BASE, **over: Any) -> StreamJobStatus:
    """A job deployed once (epoch 1), running, ready, stable."""
    text = spec_json(spec)
    fields: dict[str, Any] = dict(
        state=LifecycleState.running,
        ready=True,
        driver_pod="wc-driver-1",
        driver_epoch=1,
        checkpoint_location=f"{CK}/run-1",
        last_reconciled_spec=text,
        last_stable_spec=text,
        deployed_at=at(-3600),
        last_checkpoint=CheckpointInfo(batch_id=41, time=at(-5)),
    )
    fields.update(over)
    return StreamJobStatus().model_copy(update=fields)


def with_op(status: StreamJobStatus, **op: Any) -> StreamJobStatus:
    return status.model_copy(update={"operation": Operation(**op)})


def pod(name: str = "wc-driver-1", phase: PodPhase = PodPhase.running, **kw: Any) -> DriverPod:
    return DriverPod(name=name, phase=phase, **kw)


def failed(name: str = "wc-driver-1", code: int = 1, kind: ExitCode = ExitCode.FAILED, message: str = "ValueError: boom") -> DriverPod:
    return DriverPod(name=name, phase=PodPhase.failed if code else PodPhase.succeeded, exit_code=code, exit_kind=kind, message=message)


READY = JobProgress(RuntimeStatus(state=RunState.RUNNING, last_batch_id=42, latest_completed_batch=42, run_id="r1", query_id="q1"))
NOT_READY = JobProgress(RuntimeStatus(state=RunState.RUNNING, run_id="r2", query_id="q1"))  # no batch yet


def obs(*drivers: DriverPod, job: JobProgress | None = READY, **kw: Any) -> Observations:
    return Observations(name="wc", namespace="ns", uid=UID, generation=kw.pop("generation", 2), drivers=tuple(drivers), job=job, **kw)


@dataclass
class Expect:
    state: LifecycleState | None = None
    op: tuple[str, str] | None | str = "any"  # (kind, phase), None for no operation, "any" to skip
    actions: list[Any] | None = None  # exact actions (values), or types
    events: list[str] | None = None  # event reasons, in order (subset check if partial)
    status: dict[str, Any] = field(default_factory=dict)  # python attribute name -> expected value
    requeue: float | None | str = "any"
    done: bool = False
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # type -> (status, reason)
    status_op: dict[str, Any] = field(default_factory=dict)  # status.operation attribute -> expected value


def check(decision: Decision, expect: Expect) -> None:
    st = decision.status
    for attr, value in expect.status_op.items():
        assert st.operation is not None and getattr(st.operation, attr) == value, f"operation.{attr}: {st.operation}"
    if expect.state is not None:
        assert st.state == expect.state, f"state {st.state} != {expect.state}; events={decision.events}"
    if expect.op != "any":
        got = (st.operation.kind, st.operation.phase) if st.operation else None
        assert got == expect.op, f"operation {got} != {expect.op}; events={decision.events}"
    if expect.actions is not None:
        got_actions = list(decision.actions)
        assert len(got_actions) == len(expect.actions), f"actions {got_actions} != {expect.actions}"
        for got, want in zip(got_actions, expect.actions):
            if isinstance(want, type):
                assert isinstance(got, want), f"{got} is not a {want.__name__}"
            else:
                assert got == want, f"{got} != {want}"
    if expect.events is not None:
        assert [e.reason for e in decision.events] == expect.events, [(e.reason, e.message) for e in decision.events]
    for name, value in expect.status.items():
        assert getattr(st, name) == value, f"status.{name} = {getattr(st, name)!r}, expected {value!r}"
    if expect.requeue != "any":
        assert decision.requeue_after == expect.requeue
    assert decision.deletion_done == expect.done
    for type_, (status, reason) in expect.conditions.items():
        cond = next(c for c in st.conditions if c.type == type_)
        assert (cond.status, cond.reason) == (status, reason), f"{type_}: {cond}"
    assert sum(1 for a in decision.actions if is_disruptive(a) and not isinstance(a, DeleteDriver)) <= 1


UPGRADE_SP = f"{SP_BASE}/savepoint-20250301T115000Z-upgrade"
NEW_IMAGE = make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0")
NEW_JSON = spec_json(NEW_IMAGE)
OLD_JSON = spec_json(BASE)

CASES = [
    # --- deploy ---------------------------------------------------------------------
    pytest.param(
        BASE, StreamJobStatus(), obs(job=None),
        Expect(state=LifecycleState.deploying, op=("deploy", "Deploying"),
               actions=[EnsureSupportObjects(None),
                        CreateDriver("wc-driver-1", 1, OLD_JSON, fresh(1), None, hash_text(OLD_JSON))],
               events=["Deploying", "DriverCreated"],
               status={"driver_pod": "wc-driver-1", "driver_epoch": 1, "last_reconciled_spec": OLD_JSON},
               conditions={"Ready": ("False", "Deploying"), "Progressing": ("True", "Deploying")}),
        id="a new job gets a token, service and a driver pod with a fresh checkpoint location",
    ),
    pytest.param(
        make_spec(initialSavepointPath="s3://other/sp-1"), StreamJobStatus(), obs(job=None),
        Expect(op=("deploy", "Deploying"), actions=[EnsureSupportObjects, CreateDriver],
               status={"restored_from": "s3://other/sp-1", "checkpoint_location": fresh(1)}),
        id="a new job with initialSavepointPath restores it into a fresh checkpoint location",
    ),
    pytest.param(
        make_spec(state="suspended"), StreamJobStatus(), obs(job=None),
        Expect(state=LifecycleState.suspended, op=None, actions=[], events=["Suspended"]),
        id="a job created suspended deploys nothing",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deploying, ready=False), kind="deploy", phase="Deploying"),
        obs(pod(phase=PodPhase.pending), job=None),
        Expect(state=LifecycleState.deploying, op=("deploy", "Deploying"), actions=[], requeue=2.0),
        id="deploying waits while the driver pod is pending",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deploying, ready=False), kind="deploy", phase="Deploying"),
        obs(pod(), job=NOT_READY),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["DriverStarted"],
               conditions={"Ready": ("False", "Starting")}),
        id="deploying ends when the driver pod runs; Ready waits for a completed batch",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deploying, ready=False), kind="deploy", phase="Deploying"),
        obs(job=None),
        Expect(op=("deploy", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-1", 1, OLD_JSON, f"{CK}/run-1", None, hash_text(OLD_JSON))]),
        id="an operator killed after recording the deploy creates the same pod when it comes back",
    ),
    # --- running -----------------------------------------------------------------------
    pytest.param(
        BASE, running(ready=False, restart_count=2), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["RestartCountReset", "JobReady"],
               status={"ready": True, "restart_count": 0},
               conditions={"Ready": ("True", "Running"), "Degraded": ("False", "AsExpected")}),
        id="a restarted job ready for resetAfterSeconds since its deploy has its restart count reset",
    ),
    pytest.param(
        BASE, running(ready=False, restart_count=2, deployed_at=at(-599)), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["JobReady"], status={"ready": True, "restart_count": 2}),
        id="a restarted job ready for less than resetAfterSeconds keeps counting towards maxRestarts",
    ),
    pytest.param(
        BASE, running(), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=[], requeue=None),
        id="a ready job with an unchanged spec needs nothing",
    ),
    pytest.param(
        BASE, running(), obs(pod(name="wc-driver-1"), pod(name="wc-driver-0")),
        Expect(op=None, actions=[DeleteDriver("wc-driver-0")], events=["StrayDriverDeleted"]),
        id="a second driver pod of the job is deleted: never two drivers",
    ),
    # --- failures and restart policies ---------------------------------------------------------
    pytest.param(
        BASE, running(), obs(failed(), job=None),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), actions=[], events=["DriverFailed"],
               status={"restart_count": 1, "total_restarts": 1, "next_restart_at": at(10), "failure_times": [T0],
                       "last_error": "ValueError: boom"},
               conditions={"Degraded": ("True", "DriverFailed")}),
        id="a failed driver is restarted after the backoff's first delay, counted",
    ),
    pytest.param(
        BASE, running(restart_count=2, total_restarts=7), obs(failed(), job=None),
        Expect(op=("restart", "Stopping"), status={"restart_count": 3, "total_restarts": 8, "next_restart_at": at(40)}),
        id="the exponential backoff delay grows with consecutive restarts",
    ),
    pytest.param(
        make_spec(restartPolicy={"maxRestarts": 10}), running(restart_count=5), obs(failed(), job=None),
        Expect(op=("restart", "Stopping"), status={"next_restart_at": at(60)}),
        id="the exponential backoff delay is capped at maxDelaySeconds",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.restarting, next_restart_at=at(10)), kind="restart", phase="Stopping", restore_mode="last-state"),
        obs(failed(), job=None),
        Expect(op=("restart", "Stopping"), actions=[DeleteDriver("wc-driver-1")]),
        id="a restart first deletes the failed driver pod",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.restarting, next_restart_at=at(10)), kind="restart", phase="Stopping", restore_mode="last-state"),
        obs(job=None),
        Expect(op=("restart", "Waiting"), actions=[], requeue=10.0),
        id="with the old driver gone a restart waits for its delay",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.restarting, next_restart_at=at(-1), restored_from="s3://x/sp"),
                      kind="restart", phase="Waiting", restore_mode="last-state"),
        obs(job=None),
        Expect(state=LifecycleState.restarting, op=("restart", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, OLD_JSON, f"{CK}/run-1", "s3://x/sp", hash_text(OLD_JSON),
                                                                expect_committed=41)]),
        id="after the delay the new driver resumes the same checkpoint location (latest completed batch), expecting batch 41 there",
    ),
    pytest.param(
        make_spec(checkpoint={"acceptBehindBatch": 41}),
        with_op(running(state=LifecycleState.restarting, next_restart_at=at(-1)), kind="restart", phase="Waiting", restore_mode="last-state"),
        obs(job=None),
        Expect(op=("restart", "Deploying"), events=["DriverCreated"],
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, OLD_JSON, f"{CK}/run-1", None, hash_text(OLD_JSON))]),
        id="checkpoint.acceptBehindBatch naming the last committed batch: the restart resumes without expecting it",
    ),
    pytest.param(
        make_spec(checkpoint={"acceptBehindBatch": 7}),
        with_op(running(state=LifecycleState.restarting, next_restart_at=at(-1)), kind="restart", phase="Waiting", restore_mode="last-state"),
        obs(job=None),
        Expect(op=("restart", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, OLD_JSON, f"{CK}/run-1", None, hash_text(OLD_JSON),
                                                                expect_committed=41)]),
        id="checkpoint.acceptBehindBatch naming another batch accepts nothing",
    ),
    pytest.param(
        BASE, running(),
        obs(failed(code=15, kind=ExitCode.CHECKPOINT_BEHIND,
                   message=f"checkpoint {CK}/run-1 holds no committed batch, behind batch 41 the job committed"), job=None),
        Expect(state=LifecycleState.failed, op=None, actions=[], events=["CheckpointBehind"],
               conditions={"Degraded": ("True", "CheckpointBehind"), "Ready": ("False", "Failed")}),
        id="a driver refusing a checkpoint behind the committed batch fails the job, not restarted, naming both batches",
    ),
    pytest.param(
        BASE, running(), obs(failed(code=14, kind=ExitCode.FENCED, message="a newer driver took it"), job=None),
        Expect(state=LifecycleState.failed, op=None, actions=[], events=["Fenced"],
               conditions={"Degraded": ("True", "Fenced")}),
        id="the current driver fenced by another one: not restarted (that would fence the other in turn)",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "Never"}), running(), obs(failed(message="OOM"), job=None),
        Expect(state=LifecycleState.failed, op=None, actions=[], events=["RestartPolicyExhausted"],
               conditions={"Degraded": ("True", "RestartPolicyExhausted"), "Ready": ("False", "Failed")}),
        id="restartPolicy Never fails the job on the first failure with the driver's error",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "FixedDelay", "maxRestarts": 2}), running(restart_count=2), obs(failed(), job=None),
        Expect(state=LifecycleState.failed, op=None, events=["RestartPolicyExhausted"]),
        id="FixedDelay gives up after maxRestarts consecutive restarts",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "FailureRate", "maxFailures": 2, "failureRateIntervalSeconds": 60, "delaySeconds": 1}),
        running(failure_times=[at(-30), at(-20)]), obs(failed(), job=None),
        Expect(state=LifecycleState.failed, events=["RestartPolicyExhausted"]),
        id="FailureRate fails the job at the third failure within the window",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "FailureRate", "maxFailures": 2, "failureRateIntervalSeconds": 60, "delaySeconds": 1}),
        running(failure_times=[at(-300), at(-200), at(-20)]), obs(failed(), job=None),
        Expect(op=("restart", "Stopping"), status={"next_restart_at": at(1)}),
        id="FailureRate does not count failures older than the window",
    ),
    pytest.param(
        BASE, running(), obs(failed(code=11, kind=ExitCode.STOPPED_BY_REQUEST, message=""), job=None),
        Expect(op=("restart", "Stopping"), events=["DriverStopped"], status={"restart_count": 0, "total_restarts": 0}),
        id="a driver stopped by SIGTERM without a request is restarted and not counted as a failure",
    ),
    pytest.param(
        BASE, running(), obs(failed(code=0, kind=ExitCode.FINISHED, message=""), job=None),
        Expect(state=LifecycleState.finished, op=None, actions=[], events=["JobFinished"]),
        id="a query that ended by itself (exit 0) is Finished, not restarted",
    ),
    pytest.param(
        BASE, running(), obs(failed(code=12, kind=ExitCode.INVALID_JOB, message="job.entrypoint: no module x"), job=None),
        Expect(state=LifecycleState.failed, events=["InvalidJob"], conditions={"Degraded": ("True", "InvalidJob")}),
        id="an invalid job (a permanent exit code) fails at once without restarts",
    ),
    pytest.param(
        BASE, running(), obs(job=None),
        Expect(op=("restart", "Stopping"), events=["DriverLost"], status={"restart_count": 0}),
        id="a driver pod deleted behind the operator's back is replaced, not counted",
    ),
    pytest.param(
        BASE, running(state=LifecycleState.failed, ready=False), obs(failed(), job=None),
        Expect(state=LifecycleState.failed, op=None, actions=[], events=[]),
        id="a failed job stays failed (its pod kept for logs) until the spec changes",
    ),
    pytest.param(
        NEW_IMAGE, running(state=LifecycleState.failed, ready=False, restart_count=3), obs(failed(), job=None),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Stopping"), status={"restart_count": 0}),
        id="a failed job with a changed spec is redeployed from its latest checkpoint",
    ),
    pytest.param(
        make_spec(restartNonce=1), running(state=LifecycleState.failed, ready=False), obs(failed(), job=None),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["Restarting"]),
        id="a failed job is restarted by a restartNonce",
    ),
    # --- upgrades ----------------------------------------------------------------------------
    pytest.param(
        NEW_IMAGE, running(), obs(pod()),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Savepointing"), actions=[], events=["Upgrading"], requeue=0,
               status={"last_reconciled_spec": OLD_JSON},
               conditions={"Savepointing": ("True", "InProgress"), "Progressing": ("True", "Upgrading")}),
        id="an image change in savepoint mode records the upgrade and its savepoint path before any step",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600)),
        obs(pod()),
        Expect(op=("upgrade", "Savepointing"), actions=[TriggerSavepoint("wc-driver-1", UPGRADE_SP, stop=True, trigger_id=request_id(UPGRADE_SP))],
               status_op={"trigger_id": request_id(UPGRADE_SP)}),
        id="the upgrade asks the running driver to stop with a savepoint",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(pod(), savepoint=SavepointProgress(SavepointState.IN_PROGRESS)),
        Expect(op=("upgrade", "Savepointing"), actions=[], requeue=2.0),
        id="an upgrade waits while its savepoint is in progress",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(pod(), savepoint_unknown=True),
        Expect(op=("upgrade", "Savepointing"), actions=[TriggerSavepoint("wc-driver-1", UPGRADE_SP, stop=True, trigger_id="t1")],
               status_op={"trigger_id": "t1"}),
        id="a savepoint request the driver does not know (its POST was lost) is asked again under the same name",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(failed(code=10, kind=ExitCode.STOPPED_FOR_SAVEPOINT, message=""), job=None,
            manifest=SavepointManifest(UPGRADE_SP, batch_id=42, size_bytes=123456)),
        Expect(op=("upgrade", "Stopping"), actions=[], events=["SavepointCompleted"],
               status={"last_savepoint": SavepointInfo(path=UPGRADE_SP, batch_id=42, time=T0, trigger="upgrade", size_bytes=123456)},
               conditions={"Savepointing": ("False", "SavepointCompleted")}),
        id="a completed upgrade savepoint is recorded in status before the old driver is deleted",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Stopping", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint"),
        obs(job=None),
        Expect(state=LifecycleState.upgrading, op=("upgrade", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, NEW_JSON, fresh(2), UPGRADE_SP, hash_text(NEW_JSON))],
               status={"last_reconciled_spec": NEW_JSON, "last_stable_spec": OLD_JSON}),
        id="with the old driver gone the new spec restores the upgrade savepoint into a fresh checkpoint",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON),
                kind="upgrade", phase="Deploying", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(pod("wc-driver-1", deleting=True), job=None),
        Expect(op=("upgrade", "Deploying"), actions=[], requeue=1),
        id="an operator killed between recording epoch 2 and creating it waits for the old driver to be gone",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON),
                kind="upgrade", phase="Deploying", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(pod("wc-driver-2"), job=NOT_READY),
        Expect(op=("upgrade", "AwaitingReady"), actions=[], status={"last_stable_spec": OLD_JSON}),
        id="an upgraded driver that runs is given readinessTimeoutSeconds to become ready",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False),
                kind="upgrade", phase="AwaitingReady", savepoint_path=UPGRADE_SP, restore_mode="savepoint", deadline=at(100)),
        obs(pod("wc-driver-2")),
        Expect(state=LifecycleState.running, op=None, events=["UpgradeCompleted", "JobReady"],
               status={"last_stable_spec": NEW_JSON}),
        id="an upgraded job that completes a batch becomes the last stable spec",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False),
                kind="upgrade", phase="AwaitingReady", savepoint_path=UPGRADE_SP, restore_mode="savepoint", deadline=at(-1)),
        obs(pod("wc-driver-2"), job=NOT_READY),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"],
               conditions={"Degraded": ("True", "RolledBack")}),
        id="an upgraded job not ready by the deadline is rolled back",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False),
                kind="upgrade", phase="Deploying", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(failed("wc-driver-2", message="ImportError: no module jobs.v2"), job=None),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"],
               status={"restart_count": 0}),
        id="an upgraded driver that crashes on start is rolled back at once",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.rolling_back, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False),
                kind="rollback", phase="Stopping", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(job=None),
        Expect(op=("rollback", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-3", 3, OLD_JSON, fresh(3), UPGRADE_SP, hash_text(OLD_JSON))]),
        id="a rollback redeploys the last stable spec from the upgrade savepoint",
    ),
    pytest.param(
        NEW_IMAGE,
        running(driver_pod="wc-driver-3", driver_epoch=3,
                blocked_change=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="RolledBack", message="rolled back")),
        obs(pod("wc-driver-3")),
        Expect(state=LifecycleState.running, op=None, actions=[], conditions={"Degraded": ("True", "RolledBack"),
                                                                              "Progressing": ("False", "RolledBack")}),
        id="after a rollback the same spec is not retried",
    ),
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.3.0"),
        running(driver_pod="wc-driver-3", driver_epoch=3,
                blocked_change=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="RolledBack", message="rolled back")),
        obs(pod("wc-driver-3")),
        Expect(op=("upgrade", "Savepointing"), status={"blocked_change": None}),
        id="after a rollback the next spec change is rolled out",
    ),
    # --- a savepoint that fails never costs the job ------------------------------------------
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(pod(), savepoint=SavepointProgress(SavepointState.FAILED, error="S3 unreachable: connection refused")),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["SavepointFailed", "UpgradeAborted"],
               status={"last_reconciled_spec": OLD_JSON},
               conditions={"Savepointing": ("False", "SavepointFailed"), "Degraded": ("True", "SavepointFailed"),
                           "Ready": ("True", "Running")}),
        id="a failed upgrade savepoint keeps the old job running and says why",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(-1), trigger_id="t1"),
        obs(pod(), savepoint=SavepointProgress(SavepointState.IN_PROGRESS)),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["SavepointFailed", "UpgradeAborted"]),
        id="an upgrade savepoint past its timeout is given up and the old job kept",
    ),
    pytest.param(
        NEW_IMAGE,
        running(blocked_change=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="SavepointFailed", message="x")),
        obs(pod()),
        Expect(op=None, actions=[], events=[]),
        id="a blocked upgrade is not retried in a loop",
    ),
    pytest.param(
        make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0", savepointNonce=1),
        running(blocked_change=BlockedChange(spec_hash=spec_hash(NEW_IMAGE), reason="SavepointFailed", message="x")),
        obs(pod()),
        Expect(op=("upgrade", "Savepointing"), status={"last_savepoint_nonce": 1, "blocked_change": None}),
        id="a savepointNonce retries a blocked upgrade",
    ),
    # --- other upgrade modes and the change table ---------------------------------------------------------
    pytest.param(
        make_spec(upgradeMode="last-state", sparkConf={"spark.sql.adaptive.enabled": "false"}),
        running(make_spec(upgradeMode="last-state")), obs(pod()),
        Expect(op=("upgrade", "Stopping"), actions=[], events=["Upgrading"]),
        id="a conf change in last-state mode stops the driver without a savepoint",
    ),
    pytest.param(
        make_spec(upgradeMode="last-state", sparkConf={"a": "b"}),
        with_op(running(make_spec(upgradeMode="last-state"), state=LifecycleState.upgrading), kind="upgrade", phase="Stopping",
                restore_mode="last-state"),
        obs(job=None),
        Expect(op=("upgrade", "Deploying"), actions=[EnsureSupportObjects, CreateDriver],
               status={"checkpoint_location": f"{CK}/run-1", "driver_pod": "wc-driver-2"}),
        id="a last-state upgrade resumes the same checkpoint location",
    ),
    pytest.param(
        make_spec(upgradeMode="stateless", image="x/streamjob-runtime:2"),
        with_op(running(make_spec(upgradeMode="stateless"), state=LifecycleState.upgrading), kind="upgrade", phase="Stopping",
                restore_mode="stateless"),
        obs(job=None),
        Expect(op=("upgrade", "Deploying"), status={"checkpoint_location": fresh(2), "restored_from": None}),
        id="a stateless upgrade starts with fresh state",
    ),
    pytest.param(
        make_spec(statePartitions=16), running(), obs(pod()),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["StatePartitionsChangeRefused"],
               conditions={"Degraded": ("True", "StatePartitionsChangeRefused"), "Ready": ("True", "Running")}),
        id="a state-partition change is refused when the runtime cannot repartition",
    ),
    pytest.param(
        make_spec(statePartitions=16), running(), obs(pod(), repartition_supported=True),
        Expect(op=("upgrade", "Savepointing"), events=["Upgrading"]),
        id="a state-partition change goes through a savepoint when the runtime can repartition",
    ),
    pytest.param(
        make_spec(statePartitions=16, upgradeMode="stateless"), running(make_spec(upgradeMode="stateless")), obs(pod()),
        Expect(op=("upgrade", "Stopping")),
        id="a state-partition change in stateless mode starts fresh",
    ),
    pytest.param(
        make_spec(restartPolicy={"type": "Never"}, rollback={"readinessTimeoutSeconds": 60}), running(), obs(pod()),
        Expect(op=None, actions=[], events=[],
               status={"last_reconciled_spec": spec_json(make_spec(restartPolicy={"type": "Never"}, rollback={"readinessTimeoutSeconds": 60}))}),
        id="operator-side settings change without touching the driver",
    ),
    pytest.param(
        make_spec(restartNonce=3), running(), obs(pod()),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["Restarting"],
               status={"restart_count": 0, "last_restart_nonce": 3}),
        id="a restartNonce restarts the driver from the latest checkpoint without a savepoint",
    ),
    # --- suspend and resume --------------------------------------------------------------------------------
    pytest.param(
        make_spec(state="suspended"), running(), obs(pod()),
        Expect(state=LifecycleState.suspending, op=("suspend", "Savepointing"), events=["Suspending"]),
        id="suspending takes a savepoint first",
    ),
    pytest.param(
        make_spec(state="suspended"),
        with_op(running(state=LifecycleState.suspending), kind="suspend", phase="Stopping", savepoint_path=f"{SP_BASE}/s"),
        obs(job=None),
        Expect(state=LifecycleState.suspended, op=None, actions=[], events=["Suspended"], status={"driver_pod": None}),
        id="a suspended job has no driver",
    ),
    pytest.param(
        BASE,
        running(state=LifecycleState.suspended, driver_pod=None, ready=False,
                last_savepoint=SavepointInfo(path=f"{SP_BASE}/s", batch_id=50, trigger="suspend")),
        obs(job=None),
        Expect(state=LifecycleState.deploying, op=("resume", "Deploying"), events=["Resuming", "DriverCreated"],
               status={"restored_from": f"{SP_BASE}/s", "checkpoint_location": fresh(2)}),
        id="resuming restores the suspend savepoint",
    ),
    pytest.param(
        make_spec(state="suspended", savepointNonce=1),
        running(state=LifecycleState.suspended, driver_pod=None, ready=False), obs(job=None),
        Expect(state=LifecycleState.suspended, actions=[], events=["SavepointSkipped"], status={"last_savepoint_nonce": 1}),
        id="a savepointNonce on a suspended job is answered with an event",
    ),
    # --- savepoints on demand and on schedule, retention ---------------------------------------------------
    pytest.param(
        make_spec(savepointNonce=1), running(), obs(pod()),
        Expect(state=LifecycleState.running, op=("savepoint", "Savepointing"), events=["Savepointing"],
               status={"last_savepoint_nonce": 1}),
        id="a savepointNonce takes a savepoint",
    ),
    pytest.param(
        make_spec(savepointNonce=1),
        with_op(running(last_savepoint_nonce=1), kind="savepoint", phase="Savepointing", savepoint_path=f"{SP_BASE}/m",
                trigger="manual", deadline=at(60)),
        obs(pod()),
        Expect(op=("savepoint", "Savepointing"), actions=[TriggerSavepoint("wc-driver-1", f"{SP_BASE}/m", stop=False,
                                                                           trigger_id=request_id(f"{SP_BASE}/m"))],
               status_op={"trigger_id": request_id(f"{SP_BASE}/m")}),
        id="a manual savepoint does not stop the job",
    ),
    pytest.param(
        make_spec(savepointNonce=1),
        with_op(running(last_savepoint_nonce=1), kind="savepoint", phase="Savepointing", savepoint_path=f"{SP_BASE}/m",
                trigger="manual", deadline=at(60), trigger_id="t"),
        obs(pod(), savepoint=SavepointProgress(SavepointState.COMPLETED, path=f"{SP_BASE}/m", batch_id=43)),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["SavepointCompleted"],
               status={"savepoint_history": [SavepointInfo(path=f"{SP_BASE}/m", batch_id=43, time=T0, trigger="manual")]}),
        id="a completed manual savepoint goes into the bounded history",
    ),
    pytest.param(
        make_spec(savepointNonce=1),
        with_op(running(last_savepoint_nonce=1), kind="savepoint", phase="Savepointing", savepoint_path=f"{SP_BASE}/m",
                trigger="manual", deadline=at(60), trigger_id="t"),
        obs(pod(), savepoint=SavepointProgress(SavepointState.FAILED, error="disk full")),
        Expect(state=LifecycleState.running, op=None, events=["SavepointFailed"], status={"blocked_change": None},
               conditions={"Savepointing": ("False", "SavepointFailed"), "Ready": ("True", "Running")}),
        id="a failed manual savepoint is reported and the job keeps running",
    ),
    pytest.param(
        make_spec(savepoint={"periodicInterval": "1h"}), running(deployed_at=at(-3601)), obs(pod()),
        Expect(op=("savepoint", "Savepointing"), events=["Savepointing"]),
        id="a periodic savepoint is due an interval after the last one",
    ),
    pytest.param(
        make_spec(savepoint={"periodicInterval": "1h"}),
        running(deployed_at=at(-7200), last_savepoint_attempt_at=at(-600)), obs(pod()),
        Expect(op=None, actions=[]),
        id="a periodic savepoint is not due within the interval of the last attempt",
    ),
    pytest.param(
        make_spec(savepoint={"retention": {"count": 2}}),
        running(restored_from=f"{SP_BASE}/4", savepoint_history=[SavepointInfo(path=f"{SP_BASE}/{i}", time=at(-i)) for i in range(1, 6)]),
        obs(pod()),
        Expect(op=None, actions=[DeleteSavepoint(f"{SP_BASE}/3"), DeleteSavepoint(f"{SP_BASE}/5")], events=["SavepointsPruned"]),
        id="retention by count prunes older savepoints but never the one the current state was restored from",
    ),
    pytest.param(
        make_spec(savepoint={"retention": {"count": 10, "maxAge": "1h"}}),
        running(savepoint_history=[SavepointInfo(path=f"{SP_BASE}/{i}", time=at(-4000 * i)) for i in range(1, 4)]),
        obs(pod()),
        Expect(actions=[DeleteSavepoint(f"{SP_BASE}/2"), DeleteSavepoint(f"{SP_BASE}/3")]),
        id="retention by age prunes old savepoints but never the latest",
    ),
    # --- deletion -------------------------------------------------------------------------------------------
    pytest.param(
        BASE, running(), obs(pod(), deleting=True),
        Expect(state=LifecycleState.deleting, op=("delete", "Stopping"), events=["Deleting"], requeue=0),
        id="deletion without savepointOnDelete stops the driver",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deleting), kind="delete", phase="Stopping", deadline=at(300)),
        obs(pod(), deleting=True),
        Expect(op=("delete", "Stopping"), actions=[DeleteDriver("wc-driver-1")]),
        id="deletion deletes the driver pod gracefully",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deleting), kind="delete", phase="Stopping", deadline=at(300)),
        obs(job=None, deleting=True),
        Expect(actions=[DeleteOwnedObjects()], events=["Deleted"], done=True),
        id="deletion finishes once no driver is left",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deleting, driver_pod=None), kind="delete", phase="Done", deadline=at(300)),
        obs(job=None, deleting=True),
        Expect(actions=[], events=[], done=True),
        id="a finished deletion is only confirmed, not redone, until the finalizer is gone",
    ),
    pytest.param(
        make_spec(deletion={"savepointOnDelete": True}), running(), obs(pod(), deleting=True),
        Expect(op=("delete", "Savepointing"), events=["Deleting"]),
        id="deletion with savepointOnDelete takes a final savepoint",
    ),
    pytest.param(
        make_spec(deletion={"savepointOnDelete": True}), running(state=LifecycleState.failed), obs(failed(), job=None, deleting=True),
        Expect(op=("delete", "Stopping"), events=["Deleting"]),
        id="deletion of a failed job skips the final savepoint",
    ),
    pytest.param(
        make_spec(deletion={"savepointOnDelete": True}),
        with_op(running(state=LifecycleState.deleting), kind="delete", phase="Savepointing", savepoint_path=f"{SP_BASE}/d",
                trigger="delete", deadline=at(-1), trigger_id="t"),
        obs(pod(), deleting=True),
        Expect(op=("delete", "Stopping"), events=["SavepointFailed", "Deleting"]),
        id="a final savepoint past the deletion timeout does not block deletion",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deleting), kind="delete", phase="Stopping", deadline=at(-5)),
        obs(pod(deleting=True), deleting=True),
        Expect(actions=[DeleteDriver("wc-driver-1", grace_seconds=0)]),
        id="a driver that outlives the deletion timeout is force-deleted",
    ),
    pytest.param(
        BASE, with_op(running(state=LifecycleState.deleting), kind="delete", phase="Stopping", deadline=at(-60)),
        obs(pod(deleting=True), deleting=True),
        Expect(actions=[DeleteOwnedObjects()], events=["DeletionForced", "Deleted"], done=True),
        id="deletion finishes even when a pod never goes away",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", deadline=at(60), restore_mode="savepoint"),
        obs(pod(), deleting=True),
        Expect(op=("delete", "Stopping"), events=["Deleting", "OperationAbandoned"]),
        id="deleting a job in the middle of an upgrade abandons the upgrade",
    ),
    # --- resuming after an operator crash at each phase ------------------------------------------------------
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600)),
        obs(pod(), savepoint=None, manifest=SavepointManifest(UPGRADE_SP, batch_id=44)),
        Expect(op=("upgrade", "Stopping"), events=["SavepointCompleted"]),
        id="an operator killed after triggering finds the savepoint's manifest and goes on",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Stopping", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint"),
        obs(failed(code=10, kind=ExitCode.STOPPED_FOR_SAVEPOINT, message=""), job=None),
        Expect(op=("upgrade", "Stopping"), actions=[DeleteDriver("wc-driver-1")], events=[]),
        id="an operator killed after recording the savepoint deletes the stopped driver",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON),
                kind="upgrade", phase="Deploying", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(job=None),
        Expect(op=("upgrade", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, NEW_JSON, f"{CK}/run-1", None, hash_text(NEW_JSON))]),
        id="an operator killed before creating the new driver creates exactly the recorded one",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading, driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False),
                kind="upgrade", phase="AwaitingReady", savepoint_path=UPGRADE_SP, restore_mode="savepoint", deadline=at(100)),
        obs(pod("wc-driver-2"), job=NOT_READY),
        Expect(op=("upgrade", "AwaitingReady"), actions=[], requeue=2.0),
        id="an operator killed while awaiting readiness keeps waiting until the recorded deadline",
    ),
]


@pytest.mark.parametrize(("spec", "status", "observations", "expect"), CASES)
def test_decide(spec: StreamJobSpec, status: StreamJobStatus, observations: Observations, expect: Expect) -> None:
    check(decide(spec, status, observations, NOW), expect)


def test_conditions_carry_the_generation_and_keep_transition_times() -> None:
    first = decide(BASE, running(ready=False), obs(pod(), generation=7), NOW)
    assert {c.type for c in first.status.conditions} == {"Ready", "Progressing", "Degraded", "Savepointing", "Reconciling", "Stalled"}
    assert all(c.observed_generation == 7 for c in first.status.conditions)
    assert first.status.observed_generation == 7
    later = decide(BASE, first.status, obs(pod(), generation=7), NOW + timedelta(seconds=30))
    assert [c.last_transition_time for c in later.status.conditions] == [c.last_transition_time for c in first.status.conditions]
    assert later.events == ()


def test_a_whole_savepoint_upgrade_converges_pass_by_pass() -> None:
    """Feed each decision's status into the next pass with a simulated world; never two drivers alive."""
    status = running()
    world = {"wc-driver-1": pod()}
    now = NOW
    manifest: SavepointManifest | None = None
    for _ in range(20):
        decision = decide(NEW_IMAGE, status, obs(*world.values(), job=READY if world else None, manifest=manifest), now)
        status = decision.status
        for action in decision.actions:
            if isinstance(action, TriggerSavepoint):
                world[action.pod] = failed(action.pod, code=10, kind=ExitCode.STOPPED_FOR_SAVEPOINT, message="")
                manifest = SavepointManifest(action.path, batch_id=42)
                status = status.model_copy(update={"operation": status.operation.model_copy(update={"trigger_id": "t"})})  # type: ignore[union-attr]
            elif isinstance(action, DeleteDriver):
                world.pop(action.pod, None)
            elif isinstance(action, CreateDriver):
                assert not world, "a driver was created while another exists"
                world[action.pod] = pod(action.pod)
        now += timedelta(seconds=1)
        if status.operation is None and status.last_stable_spec == NEW_JSON:
            break
    assert status.operation is None
    assert status.driver_pod == "wc-driver-2" and list(world) == ["wc-driver-2"]
    assert status.restored_from is not None and status.restored_from.startswith("s3://streamjob/savepoints/wc-")
    assert status.last_savepoint is not None and status.last_savepoint.trigger == "upgrade"
    assert json.loads(status.last_reconciled_spec or "{}")["image"].endswith(":0.2.0")
