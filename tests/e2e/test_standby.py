"""Warm-standby upgrades on the test bed (spec.standby, docs/operations.md "Warm-standby upgrades").

An upgrade whose new driver never becomes ready (an image that cannot be pulled, a job that cannot be
planned) costs no downtime: the old driver pod stays the same pod and goes on committing batches while
the standby fails, the change is not applied, a condition and an event say why. A good upgrade goes
through the standby: both drivers exist at once, only one ever runs a query (the output is exactly once).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_e2e import DEV_IMAGE, DriverCounter, Jobs, JobWatch, Operator, assert_exactly_once, output_values, rate_job


STANDBY = {"standby": {"enabled": True, "readyTimeoutSeconds": 300}}
MISSING_IMAGE = "localhost/streamjob-missing/no-such-image:9.9.9"  # no image, no table entry: ErrImagePull


def driver_uid(jobs: Jobs, name: str, pod: str) -> str:
    return next(p.metadata.uid for p in jobs.driver_pods(name) if p.metadata.name == pod)


def assert_kept_running(watch: JobWatch, name: str, since: int, pod: str) -> None:
    """Every version recorded since the change: the same driver, its committed batch never going back, and moving."""
    versions = [v.get("status") or {} for v in watch.versions(name)[since:]]
    assert versions, "no version recorded"
    assert {st.get("driverPod") for st in versions} == {pod}, [st.get("driverPod") for st in versions]
    batches = [st["lastCheckpoint"]["batchId"] for st in versions if st.get("lastCheckpoint")]
    assert batches == sorted(batches), batches
    assert batches[-1] > batches[0], f"no batch committed while the standby failed: {batches}"


def test_a_standby_that_cannot_start_costs_no_downtime_and_the_change_is_not_applied(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, kube_api: client.ApiClient, namespace: str, s3: Any,
) -> None:
    prefix = f"e2e/{namespace}/sbf"
    good = rate_job("sbf", testbed, prefix=prefix, **STANDBY)
    jobs.apply(good)
    stable = jobs.wait_ready("sbf", driverPod="sbf-driver-1")
    uid = driver_uid(jobs, "sbf", "sbf-driver-1")

    with JobWatch(kube_api, namespace) as watch:
        # 1. an image that cannot be pulled
        since = len(watch.versions("sbf"))
        jobs.patch("sbf", {"image": MISSING_IMAGE})
        watch.recorded("sbf", "with the standby recorded", lambda st: (st.get("operation") or {}).get("standbyPod") == "sbf-driver-2",
                       timeout=60)
        blocked = jobs.wait("sbf", "the change blocked by StandbyFailed",
                            lambda st: (st.get("blockedChange") or {}).get("reason") == "StandbyFailed", timeout=300)
        assert blocked["driverPod"] == "sbf-driver-1" and blocked["state"] == "Running"
        assert blocked["lastReconciledSpec"] == stable["lastReconciledSpec"], "the change was applied"
        degraded = jobs.condition("sbf", "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "StandbyFailed")
        failed = jobs.wait_event("sbf", "StandbyFailed")
        assert "sbf-driver-2" in failed[0] and ("ErrImagePull" in failed[0] or "ImagePullBackOff" in failed[0]), failed
        wait_for(lambda: [p.metadata.name for p in jobs.driver_pods("sbf")] == ["sbf-driver-1"], 120,
                 "the standby sbf-driver-2 to be deleted")
        at_block = jobs.status("sbf")["lastCheckpoint"]["batchId"]
        jobs.wait("sbf", "batches after the failed standby", lambda st: st["lastCheckpoint"]["batchId"] >= at_block + 2, timeout=120)
        assert_kept_running(watch, "sbf", since, "sbf-driver-1")
        assert driver_uid(jobs, "sbf", "sbf-driver-1") == uid, "the driver pod was replaced"
        assert not [v for v in watch.versions("sbf")[since:] if (v.get("status") or {}).get("lastSavepoint") is not None
                    and (v["status"]["lastSavepoint"].get("trigger") == "upgrade")], "the old driver was stopped with a savepoint"

        # 2. a job that cannot be planned: the standby exits at start (INVALID_JOB)
        since = len(watch.versions("sbf"))
        broken = json.loads(json.dumps(good["spec"]["job"]))
        broken["pipeline"]["transforms"][0]["sql"] = "SELECT value, timestamp FROM no_such_table"
        jobs.patch("sbf", {"image": DEV_IMAGE, "job": broken})
        jobs.wait("sbf", "the broken job blocked by StandbyFailed",
                  lambda st: (st.get("blockedChange") or {}).get("reason") == "StandbyFailed"
                  and "sbf-driver-3" in (st.get("blockedChange") or {}).get("message", ""), timeout=420)
        messages = jobs.wait_event("sbf", "StandbyFailed")
        assert any("sbf-driver-3" in m and "no_such_table" in m for m in messages), messages
        wait_for(lambda: [p.metadata.name for p in jobs.driver_pods("sbf")] == ["sbf-driver-1"], 120,
                 "the standby sbf-driver-3 to be deleted")
        at_block = jobs.status("sbf")["lastCheckpoint"]["batchId"]
        jobs.wait("sbf", "batches after the second failed standby", lambda st: st["lastCheckpoint"]["batchId"] >= at_block + 2,
                  timeout=120)
        assert_kept_running(watch, "sbf", since, "sbf-driver-1")
        assert driver_uid(jobs, "sbf", "sbf-driver-1") == uid, "the driver pod was replaced"
        assert jobs.status("sbf")["lastReconciledSpec"] == stable["lastReconciledSpec"]

    jobs.patch("sbf", {"state": "suspended"})
    jobs.wait("sbf", "Suspended", lambda st: st.get("state") == "Suspended")
    assert_exactly_once(output_values(s3, prefix))


def test_an_upgrade_through_a_standby_hands_over_with_a_savepoint_exactly_once(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, kube_api: client.ApiClient, namespace: str, s3: Any,
) -> None:
    prefix = f"e2e/{namespace}/sbu"
    jobs.apply(rate_job("sbu", testbed, prefix=prefix, **STANDBY))
    jobs.wait_ready("sbu", driverPod="sbu-driver-1")
    with DriverCounter(kube_api, namespace) as pods, JobWatch(kube_api, namespace) as watch:
        jobs.patch("sbu", {"image": DEV_IMAGE.replace("0.1.0", "0.2.0")})
        # the standby is ready while the old driver still runs and commits
        ready = watch.recorded("sbu", "stopping the old driver once the standby is ready",
                               lambda st: (st.get("operation") or {}).get("phase") == "Savepointing"
                               and (st.get("operation") or {}).get("standbyPod") == "sbu-driver-2", timeout=420)
        assert ready[0]["status"]["driverPod"] == "sbu-driver-1"
        done = jobs.wait_ready("sbu", driverPod="sbu-driver-2")
        assert pods.max_seen == 2, f"the standby did not start next to the old driver: {pods.history}"
    assert '"image":"localhost/streamjob-dev/streamjob-runtime:0.2.0"' in done["lastStableSpec"]
    assert done["restoredFrom"] == done["lastSavepoint"]["path"] and done["lastSavepoint"]["trigger"] == "upgrade"
    reasons = jobs.reasons("sbu")
    for reason in ("StandbyCreated", "StandbyReady", "SavepointCompleted", "StandbyReleased"):
        assert reason in reasons, reasons
    # the order, from the status history (the write-ahead log each event follows): events carry whole seconds
    # only, and two posted within one second come back in no particular order
    steps = {
        "StandbyCreated": lambda st: (st.get("operation") or {}).get("standbyPod") == "sbu-driver-2",
        "StandbyReady": lambda st: (st.get("operation") or {}).get("phase") == "Savepointing"
        and (st.get("operation") or {}).get("standbyPod") == "sbu-driver-2",
        "SavepointCompleted": lambda st: (st.get("lastSavepoint") or {}).get("path") == done["lastSavepoint"]["path"],
        "StandbyReleased": lambda st: st.get("driverPod") == "sbu-driver-2",
    }
    history = [dict(v.get("status") or {}) for v in watch.versions("sbu")]
    first = {step: next((i for i, st in enumerate(history) if probe(st)), None) for step, probe in steps.items()}
    assert None not in first.values() and list(first.values()) == sorted(first.values()), first
    # the standby was named the driver only after the old one was gone
    released = [v["status"] for v in watch.versions("sbu") if (v.get("status") or {}).get("driverPod") == "sbu-driver-2"]
    assert released and all((st.get("operation") or {}).get("phase") != "Standby" for st in released)
    # before it reported STANDBY it paid the first uses of the start after the release (job_runtime.run.warmup)
    warmed = [line for line in testbed.pod_log(namespace, "sbu-driver-2").splitlines() if "warmed standby" in line]
    assert warmed and all(f"{step}=ok" in warmed[0] for step in ("s3Client", "tasks", "filesystem")), warmed
    jobs.wait("sbu", "progress after the upgrade", lambda st: st["lastCheckpoint"]["batchId"] > done["lastSavepoint"]["batchId"] + 1)
    jobs.patch("sbu", {"state": "suspended"})
    jobs.wait("sbu", "Suspended", lambda st: st.get("state") == "Suspended")
    assert_exactly_once(output_values(s3, prefix))

