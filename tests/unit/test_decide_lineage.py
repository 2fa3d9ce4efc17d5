"""Truth tables of reconcile.decide for issue 24 section 2: no restore behind what the job committed.

A savepoint is restored only when it holds the latest batch the job committed
(status.lastCheckpoint, or the checkpoint itself); a rollback is done only while
the upgraded driver has committed nothing past the upgrade savepoint. Each row
marked "refused" or "no rollback" failed before reconcile.decide.lineage (the
restore or rollback went ahead); the others hold the rule's edges.
"""

from __future__ import annotations

from streamjob_contract.runtime_status import RunState, RuntimeStatus

from typing import Any

import pytest
from test_decide import (
    CK,
    NEW_IMAGE,
    NEW_JSON,
    OLD_JSON,
    READY,
    UPGRADE_SP,
    Expect,
    NOW,
    T0,
    at,
    check,
    failed,
    fresh,
    make_spec,
    obs,
    pod,
    running,
    with_op,
)

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import CheckpointInfo, SavepointInfo, StreamJobStatus
from streamjob_operator.reconcile.decide import decide, hash_text, spec_hash, spec_json
from streamjob_operator.reconcile.model import CreateDriver, EnsureSupportObjects, JobProgress, Observations, SavepointManifest

SP_42 = SavepointInfo(path=UPGRADE_SP, batch_id=42, time=at(-60), trigger="upgrade")
OLD_SP = "s3://other/sp-old"
COMMITTING = JobProgress(RuntimeStatus(state=RunState.RUNNING, last_batch_id=45, latest_completed_batch=45, run_id="r2", query_id="q1"))
UNREACHABLE = JobProgress()


def upgrading(**over: Any) -> StreamJobStatus:
    fields: dict[str, Any] = dict(state=LifecycleState.upgrading, savepoint_history=[SP_42], last_savepoint=SP_42)
    fields.update(over)
    return running(**fields)


def upgraded(**over: Any) -> StreamJobStatus:
    """The new spec's driver (epoch 2) restored the upgrade savepoint (batch 42) into a fresh checkpoint."""
    fields: dict[str, Any] = dict(driver_pod="wc-driver-2", driver_epoch=2, last_reconciled_spec=NEW_JSON, ready=False,
                                  checkpoint_location=fresh(2), restored_from=UPGRADE_SP,
                                  last_checkpoint=CheckpointInfo(batch_id=42, time=at(-30)))
    fields.update(over)
    return upgrading(**fields)


AWAITING = dict(kind="upgrade", phase="AwaitingReady", savepoint_path=UPGRADE_SP, restore_mode="savepoint", deadline=at(-1))
DEPLOYING = dict(kind="upgrade", phase="Deploying", savepoint_path=UPGRADE_SP, restore_mode="savepoint", deadline=at(100))
REDEPLOY = make_spec(image="ghcr.io/streamjob/streamjob-runtime:0.2.0", initialSavepointPath=OLD_SP, savepointRedeployNonce=1)

CASES = [
    # --- the stop-savepoint of an upgrade, behind a driver that went on committing ---------------------
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(pod(), job=COMMITTING, manifest=SavepointManifest(UPGRADE_SP, batch_id=42, size_bytes=1)),
        Expect(state=LifecycleState.running, op=None, actions=[], events=["SavepointCompleted", "SavepointBehindJob"],
               status={"last_checkpoint": CheckpointInfo(batch_id=45, time=T0)},
               conditions={"Degraded": ("True", "SavepointBehindJob"), "Progressing": ("False", "SavepointBehindJob")}),
        id="refused: an upgrade savepoint at batch 42 while the driver still runs at 45 keeps the old job",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(running(state=LifecycleState.upgrading), kind="upgrade", phase="Savepointing", savepoint_path=UPGRADE_SP,
                trigger="upgrade", restore_mode="savepoint", deadline=at(600), trigger_id="t1"),
        obs(pod(), job=READY, manifest=SavepointManifest(UPGRADE_SP, batch_id=42, size_bytes=1)),
        Expect(op=("upgrade", "Stopping"), actions=[], events=["SavepointCompleted"]),
        id="an upgrade savepoint at the job's committed batch goes on to stop the driver",
    ),
    # --- the restore itself: the last check, whatever the operation ------------------------------------
    pytest.param(
        NEW_IMAGE,
        with_op(upgrading(last_checkpoint=CheckpointInfo(batch_id=45, time=at(-5))), kind="upgrade", phase="Stopping",
                savepoint_path=UPGRADE_SP, trigger="upgrade", restore_mode="savepoint", target_spec_hash=spec_hash(NEW_IMAGE)),
        obs(job=None),
        Expect(state=LifecycleState.restarting, op=("restart", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, OLD_JSON, f"{CK}/run-1", None, hash_text(OLD_JSON),
                                                                 expect_committed=45)],
               events=["SavepointBehindJob", "DriverCreated"],
               status={"last_reconciled_spec": OLD_JSON},
               conditions={"Degraded": ("True", "SavepointBehindJob")}),
        id="refused: with the old driver gone, a savepoint behind lastCheckpoint is not restored; the old spec resumes its checkpoint",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(upgrading(), kind="upgrade", phase="Stopping", savepoint_path=UPGRADE_SP, trigger="upgrade",
                restore_mode="savepoint", target_spec_hash=spec_hash(NEW_IMAGE)),
        obs(job=None, checkpoint_batch=44),
        Expect(op=("restart", "Deploying"), events=["SavepointBehindJob", "DriverCreated"],
               status={"checkpoint_location": f"{CK}/run-1", "restored_from": None,
                       "last_checkpoint": CheckpointInfo(batch_id=44, time=T0)}),
        id="refused: the checkpoint itself shows a batch past the savepoint the last /status poll missed",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(upgrading(last_checkpoint=CheckpointInfo(batch_id=42, time=at(-5))), kind="upgrade", phase="Stopping",
                savepoint_path=UPGRADE_SP, trigger="upgrade", restore_mode="savepoint"),
        obs(job=None, checkpoint_batch=42),
        Expect(op=("upgrade", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-2", 2, NEW_JSON, fresh(2), UPGRADE_SP, hash_text(NEW_JSON))]),
        id="a savepoint at the committed batch is restored",
    ),
    pytest.param(
        REDEPLOY,
        with_op(upgrading(savepoint_history=[SP_42, SavepointInfo(path=OLD_SP, batch_id=10, time=at(-9000))]),
                kind="upgrade", phase="Stopping", savepoint_path=OLD_SP, restore_mode="savepoint"),
        obs(job=None),
        Expect(op=("upgrade", "Deploying"), actions=[EnsureSupportObjects, CreateDriver], status={"restored_from": OLD_SP}),
        id="savepointRedeployNonce restores the savepoint the user named, however old: the documented way out",
    ),
    pytest.param(
        REDEPLOY,
        with_op(upgrading(savepoint_history=[SP_42, SavepointInfo(path=OLD_SP, batch_id=10, time=at(-9000))]),
                kind="upgrade", phase="Stopping", savepoint_path=OLD_SP, restore_mode="savepoint"),
        obs(job=None),
        Expect(status={"last_checkpoint": CheckpointInfo(batch_id=10, time=T0)}),
        id="a restore sets lastCheckpoint to the savepoint's batch: later checks compare with the restored lineage",
    ),
    pytest.param(
        REDEPLOY,
        with_op(upgraded(savepoint_history=[SP_42, SavepointInfo(path=OLD_SP, batch_id=10, time=at(-9000))],
                         restored_from=OLD_SP, last_checkpoint=CheckpointInfo(batch_id=10, time=at(-30)),
                         last_reconciled_spec=spec_json(REDEPLOY)),
                kind="upgrade", phase="Deploying", savepoint_path=OLD_SP, restore_mode="savepoint", deadline=at(100)),
        obs(failed("wc-driver-2", message="ImportError"), job=None, checkpoint_batch=10),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"]),
        id="a driver restored from an older savepoint the user named that exits before a batch past it is rolled back",
    ),
    pytest.param(
        make_spec(upgradeMode="savepoint"),
        running(state=LifecycleState.suspended, ready=False, last_checkpoint=CheckpointInfo(batch_id=45, time=at(-5)),
                last_savepoint=SavepointInfo(path=UPGRADE_SP, batch_id=42, time=at(-60), trigger="suspend"),
                savepoint_history=[SavepointInfo(path=UPGRADE_SP, batch_id=42, time=at(-60), trigger="suspend")]),
        obs(job=None),
        Expect(op=("restart", "Deploying"), events=["Resuming", "SavepointBehindJob", "DriverCreated"],
               status={"checkpoint_location": f"{CK}/run-1", "restored_from": None}),
        id="refused: a resume does not restore a suspend savepoint behind the job; it resumes the checkpoint",
    ),
    # --- rollback only before the upgraded driver committed past the savepoint --------------------------
    pytest.param(
        NEW_IMAGE,
        with_op(upgraded(), **AWAITING),
        obs(pod("wc-driver-2"), job=UNREACHABLE, checkpoint_batch=50),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["RollbackRefused"],
               status={"restart_count": 1, "last_stable_spec": OLD_JSON, "last_checkpoint": CheckpointInfo(batch_id=50, time=T0)},
               conditions={"Degraded": ("True", "RollbackRefused")}),
        id="no rollback: readiness never observed, but the checkpoint shows batch 50 past the savepoint's 42",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(upgraded(last_checkpoint=CheckpointInfo(batch_id=47, time=at(-5))), **DEPLOYING),
        obs(failed("wc-driver-2", message="OutOfMemoryError"), job=None),
        Expect(state=LifecycleState.restarting, op=("restart", "Stopping"), events=["RollbackRefused"],
               status={"restart_count": 1, "next_restart_at": at(10)}),
        id="no rollback: an upgraded driver that exits after committing batch 47 restarts from its checkpoint",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(upgraded(), **DEPLOYING),
        obs(failed("wc-driver-2", code=13, kind=ExitCode.RESTORE_REFUSED, message="refused"), job=None, checkpoint_batch=42),
        Expect(state=LifecycleState.rolling_back, op=("rollback", "Stopping"), events=["RollingBack"]),
        id="an upgraded driver that exits before committing past the savepoint is rolled back",
    ),
    pytest.param(
        NEW_IMAGE,
        with_op(upgraded(last_checkpoint=CheckpointInfo(batch_id=47, time=at(-5)), state=LifecycleState.rolling_back),
                kind="rollback", phase="Stopping", savepoint_path=UPGRADE_SP, restore_mode="savepoint"),
        obs(job=None),
        Expect(op=("restart", "Deploying"),
               actions=[EnsureSupportObjects(None), CreateDriver("wc-driver-3", 3, NEW_JSON, fresh(2), UPGRADE_SP, hash_text(NEW_JSON),
                                                                 expect_committed=47)],
               events=["SavepointBehindJob", "DriverCreated"]),
        id="refused: a rollback recorded by an older operator does not restore a savepoint behind the job",
    ),
]


@pytest.mark.parametrize(("spec", "status", "observations", "expect"), CASES)
def test_decide_lineage(spec: StreamJobSpec, status: StreamJobStatus, observations: Observations, expect: Expect) -> None:
    check(decide(spec, status, observations, NOW), expect)  # check asserts each expected field (test_decide.check)
