"""A StreamJob's life on the test bed, with the real runtime, S3 and the operator as a subprocess.

apply -> running; driver killed -> restarted from the latest checkpoint; manual
savepoint; image change -> savepoint upgrade (the superseded checkpoint run
directory is then pruned); suspend and resume; delete with
a final savepoint. Output is checked exactly-once against the rate source's
reference (0, 1, 2, ... each once); never two drivers at any time.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from streamjob_contract.lifecycle import LifecycleState

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_e2e import (
    IMAGE,
    DriverCounter,
    Jobs,
    Operator,
    assert_exactly_once,
    assert_runs_in_image,
    kill_driver_process,
    output_values,
    rate_job,
    savepoint_manifest,
)



def test_a_job_runs_restarts_upgrades_suspends_resumes_and_is_deleted_with_a_savepoint(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any,
    namespace: str, core_v1: client.CoreV1Api, built_images: str,
) -> None:
    prefix = f"e2e/{namespace}/life"
    # the driver runs inside the built runtime image, then inside its 0.1.1 tag
    jobs.apply(rate_job("life", testbed, prefix=prefix, image=IMAGE,
                        deletion={"savepointOnDelete": True, "timeoutSeconds": 180}))

    # apply -> running: owned objects, Ready, progress in status
    first = jobs.wait_ready("life")
    assert first["driverPod"] == "life-driver-1"
    assert_runs_in_image(testbed, namespace, "life-driver-1")
    assert core_v1.read_namespaced_secret("life-token", namespace).metadata.owner_references[0].kind == "StreamJob"
    assert core_v1.read_namespaced_service("life-driver", namespace).spec.cluster_ip == "None"
    jobs.wait("life", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 2)

    # kill the driver -> counted restart from the latest checkpoint (same checkpoint location)
    before = jobs.status("life")
    kill_driver_process(testbed, namespace, "life-driver-1")
    restarted = jobs.wait_ready("life", driverPod="life-driver-2")
    assert restarted["totalRestarts"] == 1
    assert restarted["checkpointLocation"] == before["checkpointLocation"]
    failed = [m for r, m in jobs.events("life") if r == "DriverFailed"]
    assert failed and "exit 137" in failed[0], jobs.events("life")
    jobs.wait("life", "progress past the pre-kill batch",
              lambda st: st["lastCheckpoint"]["batchId"] > before["lastCheckpoint"]["batchId"])

    # manual savepoint: the job keeps running, the savepoint is in S3 with its manifest
    jobs.patch("life", {"savepointNonce": 1})
    manual = jobs.wait("life", "a manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual")
    assert manual["driverPod"] == "life-driver-2" and manual["state"] == LifecycleState.running
    assert savepoint_manifest(s3, manual["lastSavepoint"]["path"]) is not None

    # image change -> stop with savepoint, new driver restores it into a fresh checkpoint location
    jobs.patch("life", {"image": IMAGE.replace("0.1.0", "0.1.1")})
    upgraded = jobs.wait_ready("life", driverPod="life-driver-3")
    assert upgraded["lastSavepoint"]["trigger"] == "upgrade"
    assert upgraded["restoredFrom"] == upgraded["lastSavepoint"]["path"]
    assert upgraded["checkpointLocation"].endswith("/run-3")
    assert '"image":"ghcr.io/streamjob/streamjob-runtime:0.1.1"' in upgraded["lastStableSpec"]
    assert_runs_in_image(testbed, namespace, "life-driver-3")
    jobs.wait_event("life", "UpgradeCompleted")  # posted after the status write that wait_ready saw
    assert {"Upgrading", "SavepointCompleted", "DriverCreated"} <= set(jobs.reasons("life")), jobs.events("life")

    # storage hygiene: once the upgraded driver has committed a batch of its own, it prunes the superseded run-1
    old, new = (st["checkpointLocation"].split("://streamjob/", 1)[1] for st in (before, upgraded))
    wait_for(lambda: s3.list_objects_v2(Bucket="streamjob", Prefix=f"{old}/").get("KeyCount", 0) == 0, 120,
             f"the superseded checkpoint {old} to be pruned")
    assert s3.list_objects_v2(Bucket="streamjob", Prefix=f"{new}/commits/").get("KeyCount", 0) > 0, new
    pruned = jobs.wait("life", "status.job.storage to show it",
                       lambda st: (((st.get("job") or {}).get("storage") or {}).get("prunedRunDirs") or 0) >= 1)
    assert not pruned["job"]["storage"].get("lastError"), pruned["job"]["storage"]

    # suspend: savepoint, no driver; resume: restores it
    jobs.patch("life", {"state": "suspended"})
    suspended = jobs.wait("life", "Suspended", lambda st: st.get("state") == "Suspended")
    assert suspended["lastSavepoint"]["trigger"] == "suspend" and suspended.get("driverPod") is None
    wait_for(lambda: not jobs.driver_pods("life"), 60, "no driver pod while suspended")
    jobs.patch("life", {"state": "running"})
    resumed = jobs.wait_ready("life", driverPod="life-driver-4")
    assert resumed["restoredFrom"] == suspended["lastSavepoint"]["path"]
    jobs.wait("life", "progress after resume", lambda st: st["lastCheckpoint"]["batchId"] > suspended["lastSavepoint"]["batchId"])

    # delete with savepointOnDelete: a final savepoint, then everything owned is gone
    history_before = {h["path"] for h in jobs.status("life").get("savepointHistory", [])}
    jobs.delete("life")
    wait_for(lambda: _gone(jobs, "life"), 240, "the StreamJob to be deleted")
    final = [m for r, m in jobs.events("life") if r == "SavepointCompleted" and "(delete)" in m]
    assert final, jobs.events("life")
    final_path = final[0].split()[1]
    assert final_path not in history_before and savepoint_manifest(s3, final_path) is not None
    wait_for(lambda: not jobs.driver_pods("life"), 60, "no driver pod after deletion")
    assert not core_v1.list_namespaced_secret(namespace, label_selector="streamjob.io/job=life").items

    # exactly-once output across a crash, an upgrade and a suspension
    assert_exactly_once(output_values(s3, prefix))
    assert drivers.max_seen == 1


def _gone(jobs: Jobs, name: str) -> bool:
    try:
        jobs.get(name)
    except client.ApiException as err:
        return err.status == 404
    return False

