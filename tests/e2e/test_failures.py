"""Failure paths on the test bed: rollback, restart policy exhausted, S3 down during an upgrade, operator killed mid-upgrade."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from testbed import TestBed
from testbed.waiting import wait_for
from streamjob_contract.lifecycle import LifecycleState

from streamjob_e2e import (
    DEV_IMAGE,
    DriverCounter,
    Jobs,
    Operator,
    S3Switch,
    assert_exactly_once,
    file_output_values,
    output_values,
    rate_job,
    savepoint_manifest,
)



def test_an_upgrade_that_crashes_on_start_is_rolled_back_and_a_crashing_job_fails_when_its_policy_is_used_up(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any, namespace: str,
) -> None:
    prefix = f"e2e/{namespace}/rb"
    jobs.apply(rate_job("rb", testbed, prefix=prefix))
    stable = jobs.wait_ready("rb")

    broken = rate_job("rb", testbed, prefix=prefix)["spec"]["job"]
    broken["pipeline"]["transforms"][0]["sql"] = "SELECT value, timestamp FROM no_such_table"
    jobs.patch("rb", {"job": broken})
    jobs.wait("rb", "a rollback", lambda st: (st.get("blockedChange") or {}).get("reason") == "RolledBack")
    rolled = jobs.wait_ready("rb", driverPod="rb-driver-3")
    assert rolled["lastStableSpec"] == stable["lastStableSpec"]
    assert rolled["restoredFrom"] == rolled["lastSavepoint"]["path"] and rolled["lastSavepoint"]["trigger"] == "upgrade"
    degraded = jobs.condition("rb", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "RolledBack")
    rollback_events = [m for r, m in jobs.events("rb") if r == "RollingBack"]
    assert rollback_events and "rb-driver-2" in rollback_events[0], jobs.events("rb")
    jobs.wait_event("rb", "RolledBack")  # posted in the pass that may be the one whose status wait_ready saw
    jobs.wait("rb", "progress after the rollback",
              lambda st: st["lastCheckpoint"]["batchId"] > rolled["lastSavepoint"]["batchId"] + 1)
    jobs.delete("rb")
    wait_for(lambda: not jobs.driver_pods("rb"), 120, "rb's driver to be gone")
    assert_exactly_once(output_values(s3, prefix))

    # a job that fails on every run: FixedDelay with one restart, then Failed with the driver's error
    crash = rate_job("crash", testbed, prefix=f"e2e/{namespace}/crash",
                     restartPolicy={"type": "FixedDelay", "delaySeconds": 1, "maxRestarts": 1})
    crash["spec"]["job"]["pipeline"]["transforms"][0]["sql"] = (
        "SELECT value, timestamp, assert_true(value < 0, 'value must be negative') AS ok FROM ticks"
    )
    jobs.apply(crash)
    failed = jobs.wait("crash", "Failed", lambda st: st.get("state") == "Failed")
    assert failed["totalRestarts"] == 1
    # the event is posted after the status write that says Failed (handlers.reconcile: the status comes first)
    exhausted = jobs.wait_event("crash", "RestartPolicyExhausted")
    assert "value must be negative" in exhausted[0], jobs.events("crash")
    degraded = jobs.condition("crash", "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "RestartPolicyExhausted")
    assert "value must be negative" in (failed.get("lastError") or "")


def test_a_savepoint_failing_while_s3_is_down_keeps_the_old_job_and_the_upgrade_completes_when_s3_is_back(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, host_dir: Path,
) -> None:
    local = str(host_dir)
    jobs.apply(rate_job("sp", testbed, prefix=local, storage="file", savepoint={"timeoutSeconds": 60}))
    jobs.wait_ready("sp")
    switch = S3Switch(testbed)
    switch.stop()
    try:
        jobs.patch("sp", {"image": DEV_IMAGE.replace("0.1.0", "0.2.0")})
        blocked = jobs.wait("sp", "the upgrade to be blocked by the failed savepoint",
                            lambda st: (st.get("blockedChange") or {}).get("reason") == "SavepointFailed", timeout=180)
        assert blocked["driverPod"] == "sp-driver-1" and blocked["state"] == LifecycleState.running
        # both posted after the status write that recorded the blocked change
        jobs.wait_event("sp", "SavepointFailed")
        jobs.wait_event("sp", "UpgradeAborted")
        savepointing = jobs.condition("sp", "Savepointing")
        assert (savepointing["status"], savepointing["reason"]) == ("False", "SavepointFailed")
        assert "kept" in jobs.condition("sp", "Degraded")["message"]
        batch = jobs.status("sp")["lastCheckpoint"]["batchId"]
        jobs.wait("sp", "the old job to keep running while S3 is down",
                  lambda st: st.get("ready") and st["lastCheckpoint"]["batchId"] > batch + 1, timeout=120)
    finally:
        switch.start()
    jobs.patch("sp", {"savepointNonce": 1})  # the documented retry
    done = jobs.wait_ready("sp", driverPod="sp-driver-2")
    assert '"image":"localhost/streamjob-dev/streamjob-runtime:0.2.0"' in done["lastStableSpec"]
    assert done.get("blockedChange") is None and done["restoredFrom"] == done["lastSavepoint"]["path"]
    jobs.wait("sp", "progress after the upgrade", lambda st: st["lastCheckpoint"]["batchId"] > done["lastSavepoint"]["batchId"] + 1)
    jobs.patch("sp", {"state": "suspended"})
    jobs.wait("sp", "Suspended", lambda st: st.get("state") == "Suspended")
    assert_exactly_once(file_output_values(local))


def test_an_operator_killed_at_each_step_of_an_upgrade_converges_without_two_drivers(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any, namespace: str,
) -> None:
    prefix = f"e2e/{namespace}/kill"
    jobs.apply(rate_job("kill", testbed, prefix=prefix))
    jobs.wait_ready("kill")

    killed_at: list[str] = []
    stop = threading.Event()

    def killer() -> None:
        wanted = ["Savepointing", "Stopping", "Deploying", "AwaitingReady"]
        while not stop.is_set():
            try:
                op = jobs.status("kill").get("operation") or {}
            except Exception:
                time.sleep(0.2)
                continue
            phase = op.get("phase")
            if phase in wanted and phase not in killed_at:
                operator.kill()
                killed_at.append(phase)
                time.sleep(1.0)
                operator.start()
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        jobs.patch("kill", {"sparkConf": {"spark.sql.streaming.minBatchesToRetain": "50"}})
        done = jobs.wait_ready("kill", driverPod="kill-driver-2", timeout=600)
    finally:
        stop.set()
        thread.join(10)
    assert len(killed_at) >= 2, f"the operator was killed only at {killed_at}"
    assert json.loads(done["lastStableSpec"])["sparkConf"] == {"spark.sql.streaming.minBatchesToRetain": "50"}
    assert savepoint_manifest(s3, done["restoredFrom"]) is not None
    jobs.wait("kill", "progress after the upgrade", lambda st: st["lastCheckpoint"]["batchId"] > done["lastSavepoint"]["batchId"] + 1)
    jobs.delete("kill")
    wait_for(lambda: not jobs.driver_pods("kill"), 120, "the driver to be gone")
    assert_exactly_once(output_values(s3, prefix))
    assert drivers.max_seen == 1, drivers.history
    print(f"operator killed at phases {killed_at}")
