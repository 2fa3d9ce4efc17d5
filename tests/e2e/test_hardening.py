"""What a user sees when the cluster, S3 or the spec gets in the way, on the test bed.

Each refusal comes from a real component: the API server's ResourceQuota and
ValidatingAdmissionPolicy admission, the node's kubelet (a missing Secret, an
unknown image), and the operator's own deadlines. Each test asserts what is
observable: status.reconcileError, the Degraded condition, events, pods and the
job's output (exactly once where the claim is that no record is lost or doubled).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from streamjob_operator.api.spec import API_GROUP
from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_e2e import (
    DEV_IMAGE,
    DriverCounter,
    Jobs,
    Operator,
    assert_exactly_once,
    output_values,
    rate_job,
    savepoint_manifest,
)


UNKNOWN_IMAGE = "ghcr.io/streamjob/streamjob-runtme:0.1.1"  # a typo: an image no store has


def _degraded(st: dict[str, Any]) -> tuple[str, str, str]:
    cond: dict[str, str] = next((c for c in st.get("conditions", []) if c["type"] == "Degraded"), {})
    return cond.get("status", ""), cond.get("reason", ""), cond.get("message", "")


def _probe_pod(namespace: str) -> client.V1Pod:
    """A pod like a driver (same labels) for a dry-run create: admission runs, nothing is stored."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"probe-{uuid.uuid4().hex[:6]}", namespace=namespace,
                                     labels={"streamjob.io/role": "driver", "streamjob.io/job": "probe"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox", command=["true"])]),
    )


def _refused(core_v1: client.CoreV1Api, namespace: str, words: str) -> bool:
    try:
        core_v1.create_namespaced_pod(namespace, _probe_pod(namespace), dry_run="All")
    except ApiException as err:
        return words in (err.body or "")
    return False


@contextmanager
def _admission_policy(kube_api: client.ApiClient, namespace: str, *, resources: list[str], api_groups: list[str],
                      operations: list[str], expression: str, message: str) -> Iterator[str]:
    """A ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1), scoped to one namespace."""
    adm = client.AdmissionregistrationV1Api(kube_api)
    name = f"e2e-{namespace}"[:60]
    only_here = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    adm.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": only_here,
                "resourceRules": [{"apiGroups": api_groups, "apiVersions": ["*"], "operations": operations, "resources": resources}],
            },
            "validations": [{"expression": expression, "message": message}],
        },
    })
    adm.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {"namespaceSelector": only_here}},
    })
    try:
        yield name
    finally:
        remove_admission_policy(kube_api, name)


def remove_admission_policy(kube_api: client.ApiClient, name: str) -> None:
    adm = client.AdmissionregistrationV1Api(kube_api)
    for delete in (adm.delete_validating_admission_policy_binding, adm.delete_validating_admission_policy):
        try:
            delete(name)
        except ApiException as err:
            if err.status != 404:
                raise


def _gone(jobs: Jobs, name: str) -> bool:
    try:
        jobs.get(name)
    except ApiException as err:
        return err.status == 404
    return False


# --- the API server refuses the driver pod ----------------------------------------------------------


def test_a_quota_that_forbids_the_driver_pod_is_reported_at_once_and_the_job_runs_when_it_is_lifted(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, namespace: str,
    core_v1: client.CoreV1Api,
) -> None:
    core_v1.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-pods"), spec=client.V1ResourceQuotaSpec(hard={"pods": "0"})))
    # the quota controller fills in status.hard; until then admission says "status unknown", not "exceeded"
    wait_for(lambda: _refused(core_v1, namespace, "exceeded quota"), 60, "the quota to be enforced")

    jobs.apply(rate_job("quota", testbed, prefix=f"e2e/{namespace}/quota"))
    applied = time.monotonic()
    refused = jobs.wait("quota", "QuotaExceeded in status",
                        lambda st: (st.get("reconcileError") or {}).get("reason") == "QuotaExceeded", timeout=30)
    assert time.monotonic() - applied < 20, "the refusal took more than a few passes to reach status"
    assert "quota-driver-1" in refused["reconcileError"]["message"] and "no-pods" in refused["reconcileError"]["message"]
    status, reason, message = _degraded(jobs.status("quota"))
    assert (status, reason) == ("True", "QuotaExceeded") and "exceeded quota" in message
    events = jobs.wait_event("quota", "QuotaExceeded")  # posted after the status write that reported it
    assert "quota-driver-1" in events[0], jobs.events("quota")
    assert not jobs.driver_pods("quota")
    # the refusal repeats on every pass: counted, one event
    jobs.wait("quota", "the refusal counted again", lambda st: st["reconcileError"]["count"] >= 3, timeout=30)
    assert len([r for r in jobs.reasons("quota") if r == "QuotaExceeded"]) == 1, jobs.events("quota")

    core_v1.delete_namespaced_resource_quota("no-pods", namespace)
    ready = jobs.wait_ready("quota", driverPod="quota-driver-1")
    assert ready.get("reconcileError") is None
    status, reason, _ = _degraded(ready)
    assert (status, reason) == ("False", "AsExpected")
    assert ready["totalRestarts"] == 0


def test_an_admission_policy_that_denies_driver_pods_is_reported_and_cleared_when_it_is_removed(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, namespace: str,
    kube_api: client.ApiClient, core_v1: client.CoreV1Api,
) -> None:
    with _admission_policy(kube_api, namespace, resources=["pods"], api_groups=[""], operations=["CREATE"],
                           expression="!has(object.metadata.labels) || !('streamjob.io/role' in object.metadata.labels)",
                           message="streaming drivers are not allowed in this namespace"):
        wait_for(lambda: _refused(core_v1, namespace, "streaming drivers are not allowed"), 60, "the policy to be enforced")
        jobs.apply(rate_job("vap", testbed, prefix=f"e2e/{namespace}/vap"))
        refused = jobs.wait("vap", "AdmissionDenied in status",
                            lambda st: (st.get("reconcileError") or {}).get("reason") == "AdmissionDenied", timeout=30)
        assert "vap-driver-1" in refused["reconcileError"]["message"]
        assert "streaming drivers are not allowed" in refused["reconcileError"]["message"]
        status, reason, _ = _degraded(jobs.status("vap"))
        assert (status, reason) == ("True", "AdmissionDenied")
        events = jobs.wait_event("vap", "AdmissionDenied")  # posted after the status write that reported it
        assert "streaming drivers are not allowed" in events[0], jobs.events("vap")
        assert not jobs.driver_pods("vap")

    wait_for(lambda: jobs.driver_pods("vap"), 60, "the driver pod once the policy is gone")
    # the pass that went through clears reconcileError, and the one it chains at once decides Degraded again
    cleared = jobs.wait("vap", "the error cleared", lambda st: st.get("reconcileError") is None
                        and _degraded(st)[1] != "AdmissionDenied", timeout=30)
    assert cleared["driverPod"] == "vap-driver-1"
    assert _degraded(cleared)[0] == "False", _degraded(cleared)
    # its point is made: no need to wait for Spark (the starting JVM would take its grace period to stop)
    jobs.delete("vap")
    core_v1.delete_namespaced_pod("vap-driver-1", namespace, grace_period_seconds=0)
    wait_for(lambda: _gone(jobs, "vap"), 60, "the job to be deleted")


# --- the kubelet cannot start the driver ---------------------------------------------------------------


def test_a_missing_s3_secret_is_named_while_the_driver_waits_and_the_deadline_fails_the_job(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, namespace: str,
) -> None:
    jobs.apply(rate_job("nosecret", testbed, prefix=f"e2e/{namespace}/nosecret",
                        s3={"credentialsSecret": {"name": "missing-s3-creds"}},
                        rollback={"readinessTimeoutSeconds": 10},
                        restartPolicy={"type": "FixedDelay", "delaySeconds": 1, "maxRestarts": 1}))
    stuck = jobs.wait("nosecret", "Degraded CreateContainerConfigError",
                      lambda st: _degraded(st)[1] == "CreateContainerConfigError", timeout=30)
    assert 'secret "missing-s3-creds" not found' in _degraded(stuck)[2] and "nosecret-driver-1" in _degraded(stuck)[2]
    events = jobs.wait_event("nosecret", "CreateContainerConfigError")  # posted after the status write with Degraded
    assert "missing-s3-creds" in events[0], jobs.events("nosecret")

    failed = jobs.wait("nosecret", "Failed once the restart policy is used up", lambda st: st.get("state") == "Failed", timeout=120)
    assert failed["totalRestarts"] == 1 and failed["driverEpoch"] == 2
    jobs.wait_event("nosecret", "RestartPolicyExhausted")  # posted after the status write that says Failed
    assert "DriverNotStarted" in jobs.reasons("nosecret"), jobs.events("nosecret")
    not_started = [m for r, m in jobs.events("nosecret") if r == "DriverNotStarted"]
    assert "missing-s3-creds" in not_started[0] and "readinessTimeoutSeconds=10s" in not_started[0], not_started
    assert "missing-s3-creds" in failed["lastError"]
    status, reason, message = _degraded(failed)
    assert (status, reason) == ("True", "RestartPolicyExhausted") and "missing-s3-creds" in message
    # the operator's own read of the Secret (the checkpoint's latest batch, once the driver is gone) fails too, and says which
    # (reported by a pass of its own, which may come after the one that wrote Failed: waited for, not read at once)
    own = wait_for(lambda: [m for r, m in jobs.events("nosecret") if "spec.s3.credentialsSecret" in m], 30,
                   "an event naming spec.s3.credentialsSecret")
    assert 'secrets "missing-s3-creds" not found' in own[0], jobs.events("nosecret")


def test_an_image_typo_in_an_upgrade_is_rolled_back_from_its_savepoint_then_a_redeploy_nonce_restores_an_older_one(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any, namespace: str,
) -> None:
    """Two ways back to a savepoint, on one job (one Spark start fewer): the automatic rollback of an upgrade
    whose image does not exist, from the upgrade's savepoint, exactly once; then savepointRedeployNonce with
    initialSavepointPath, from an older manual savepoint, which discards the newer state."""
    prefix = f"e2e/{namespace}/typo"
    jobs.apply(rate_job("typo", testbed, prefix=prefix))
    first = jobs.wait_ready("typo")
    jobs.wait("typo", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 2)
    jobs.patch("typo", {"savepointNonce": 1})
    manual = jobs.wait("typo", "a manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual")["lastSavepoint"]
    assert savepoint_manifest(s3, manual["path"]) is not None
    stable = jobs.wait("typo", "the nonce in the stable spec", lambda st: st["lastStableSpec"] == st["lastReconciledSpec"])

    # the typo: the new driver waits in ErrImagePull; Degraded and an event say so at once, the deadline rolls back
    jobs.patch("typo", {"image": UNKNOWN_IMAGE, "rollback": {"readinessTimeoutSeconds": 20}})
    pending = jobs.wait("typo", "the image pull failure in Degraded",
                        lambda st: _degraded(st)[1] in ("ErrImagePull", "ImagePullBackOff"), timeout=180)
    assert pending["state"] == "Upgrading" and pending["driverPod"] == "typo-driver-2"
    assert UNKNOWN_IMAGE in _degraded(pending)[2]
    pulled = jobs.wait_event("typo", "ErrImagePull")  # posted after the status write with Degraded
    assert "typo-driver-2" in pulled[0] and UNKNOWN_IMAGE in pulled[0], jobs.events("typo")

    rolled = jobs.wait_ready("typo", driverPod="typo-driver-3", timeout=420)
    assert rolled["lastStableSpec"] == stable["lastStableSpec"] and stable_image(rolled) == DEV_IMAGE
    assert rolled["lastSavepoint"]["trigger"] == "upgrade" and rolled["restoredFrom"] == rolled["lastSavepoint"]["path"]
    assert savepoint_manifest(s3, rolled["restoredFrom"]) is not None
    assert rolled["blockedChange"]["reason"] == "RolledBack"
    rolling = [m for r, m in jobs.events("typo") if r == "RollingBack"]
    assert rolling and "readinessTimeoutSeconds=20s" in rolling[0] and UNKNOWN_IMAGE in rolling[0], jobs.events("typo")
    jobs.wait_event("typo", "RolledBack")  # posted in the pass that may be the one whose status wait_ready saw
    status, reason, _ = _degraded(rolled)
    assert (status, reason) == ("True", "RolledBack")
    later = jobs.wait("typo", "progress after the rollback",
                      lambda st: st["lastCheckpoint"]["batchId"] >= max(rolled["lastSavepoint"]["batchId"] + 2, manual["batchId"] + 8))
    # committed output so far (the sink's log is complete per batch): each value once across the rollback
    assert_exactly_once(output_values(s3, prefix))

    # back to the older manual savepoint, on purpose: a new driver restores it, the newer batches are discarded
    jobs.patch("typo", {"image": stable_image(stable), "rollback": {"readinessTimeoutSeconds": 300},
                        "initialSavepointPath": manual["path"], "savepointRedeployNonce": 1})
    redeployed = jobs.wait_ready("typo", driverPod="typo-driver-4")
    announced = [m for r, m in jobs.events("typo") if r == "RedeployingFromSavepoint"]
    assert announced and manual["path"] in announced[0], jobs.events("typo")
    assert redeployed["restoredFrom"] == manual["path"]
    assert redeployed["checkpointLocation"].endswith("/run-4")
    assert redeployed["checkpointLocation"] not in (first["checkpointLocation"], rolled["checkpointLocation"])
    restored_batch = redeployed["lastCheckpoint"]["batchId"]
    before = later["lastCheckpoint"]["batchId"]
    assert manual["batchId"] <= restored_batch < before, (
        f"after restoring the savepoint of batch {manual['batchId']} the job is at batch {restored_batch} (it was at {before})")
    assert redeployed.get("blockedChange") is None and _degraded(redeployed)[0] == "False"
    jobs.wait("typo", "progress after the redeploy", lambda st: st["lastCheckpoint"]["batchId"] > restored_batch + 1)


def stable_image(status: dict[str, Any]) -> str:
    return str(json.loads(status["lastStableSpec"])["image"])


# --- deletion when every pass fails ------------------------------------------------------------------


def test_deletion_is_bounded_when_every_pass_fails(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, namespace: str,
    kube_api: client.ApiClient, core_v1: client.CoreV1Api,
) -> None:
    # a driver pod that never runs (unknown image), so no Spark is needed; deletion must stop it
    jobs.apply(rate_job("stuck", testbed, prefix=f"e2e/{namespace}/stuck", image=UNKNOWN_IMAGE, deletion={"timeoutSeconds": 0}))
    jobs.wait("stuck", "the pending driver", lambda st: _degraded(st)[1] in ("ErrImagePull", "ImagePullBackOff"), timeout=60)
    assert [p.metadata.name for p in jobs.driver_pods("stuck")] == ["stuck-driver-1"]

    # the API server now refuses every status write of StreamJobs here (the write-ahead log), so every pass fails
    custom = client.CustomObjectsApi(kube_api)
    with _admission_policy(kube_api, namespace, resources=["streamjobs/status"], api_groups=[API_GROUP], operations=["UPDATE"],
                           expression="false", message="StreamJob status is frozen in this namespace"):
        def status_frozen() -> bool:
            try:
                custom.patch_namespaced_custom_object_status(API_GROUP, "v1alpha1", namespace, "streamjobs", "stuck",
                                                             {"status": {"ready": False}}, dry_run="All")
            except ApiException as err:
                return "frozen" in (err.body or "")
            return False

        wait_for(status_frozen, 60, "the status policy to be enforced")
        earlier = jobs.reasons("stuck").count("StatusWriteFailed")
        jobs.delete("stuck")
        requested = datetime.now(timezone.utc)
        wait_for(lambda: jobs.reasons("stuck").count("StatusWriteFailed") > earlier, 30, "a failed pass during deletion")
        failed = [m for r, m in jobs.events("stuck") if r == "StatusWriteFailed"]
        assert "frozen" in failed[-1], failed
        assert not _gone(jobs, "stuck") and jobs.driver_pods("stuck"), "deletion finished although no pass could"

        wait_for(lambda: _gone(jobs, "stuck"), 150, "the finalizer to be released after the deletion deadline")
        took = (datetime.now(timezone.utc) - requested).total_seconds()
        timed_out = [m for r, m in jobs.events("stuck") if r == "DeletionTimedOut"]
        assert timed_out and "spec.deletion.timeoutSeconds=0s" in timed_out[0], jobs.events("stuck")
        assert 55 <= took <= 120, f"the finalizer was released {took:.0f}s after the delete (timeoutSeconds 0 + 60s expected)"
    # the driver pod is owned by the job: garbage collection removes it
    wait_for(lambda: not jobs.driver_pods("stuck"), 90, "garbage collection of the driver pod")


# --- checkpoints and savepoints ----------------------------------------------------------------------


def test_two_jobs_given_the_same_checkpoint_location_never_share_a_checkpoint(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, s3: Any, namespace: str,
) -> None:
    shared = f"s3a://streamjob/e2e/{namespace}/shared-checkpoints"
    for name in ("twin-a", "twin-b"):
        jobs.apply(rate_job(name, testbed, prefix=f"e2e/{namespace}/{name}", checkpoint={"location": shared}))
    a = jobs.wait_ready("twin-a")
    b = jobs.wait_ready("twin-b")
    assert a["checkpointLocation"] != b["checkpointLocation"]
    for st in (a, b):
        assert st["checkpointLocation"].startswith(shared + "/") and st["checkpointLocation"].endswith("/run-1")
    for name in ("twin-a", "twin-b"):
        jobs.wait(name, "progress side by side", lambda st: st["lastCheckpoint"]["batchId"] >= 4)
        assert jobs.status(name)["totalRestarts"] == 0
    for st in (a, b):  # each commits batches into its own checkpoint under the shared location
        key = st["checkpointLocation"].split("://streamjob/", 1)[1]
        assert s3.list_objects_v2(Bucket="streamjob", Prefix=f"{key}/commits/").get("KeyCount", 0) > 0, key
    for name in ("twin-a", "twin-b"):
        jobs.delete(name)
    for name in ("twin-a", "twin-b"):
        wait_for(lambda: not jobs.driver_pods(name), 120, f"{name}'s driver to be gone")
        assert_exactly_once(output_values(s3, f"e2e/{namespace}/{name}"))


def test_a_stored_spec_with_a_credential_in_spark_conf_is_reported_and_never_deployed(
    kube_api: client.ApiClient, testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, namespace: str,
) -> None:
    """A StreamJob stored under an older CRD without the sparkConf credential rule (an operator upgrade):
    the operator says so in status and an event, creates no driver, and the value is nowhere."""
    from streamjob_operator.api import crd

    ext = client.ApiextensionsV1Api(kube_api)
    current = crd.generate_crd()
    older = json.loads(json.dumps(current))
    spark_conf = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["sparkConf"]
    del spark_conf["x-kubernetes-validations"]
    name = current["metadata"]["name"]

    def install(body: dict[str, Any]) -> None:
        live = ext.read_custom_resource_definition(name)
        body = {**body, "metadata": {**body["metadata"], "resourceVersion": live.metadata.resource_version}}
        ext.replace_custom_resource_definition(name, body)

    secret_value = f"hunter2-{uuid.uuid4().hex[:6]}"
    manifest = rate_job("oldspec", testbed, prefix=f"e2e/{namespace}/oldspec",
                        sparkConf={"spark.hadoop.fs.s3a.secret.key": secret_value})
    install(older)
    try:
        wait_for(lambda: _create_or_refused(jobs, manifest), 60, "the older CRD to accept the job")
    finally:
        install(current)
    st = jobs.wait("oldspec", "Degraded InvalidSpec", lambda s: _degraded(s)[1] == "InvalidSpec", timeout=60)
    assert "sparkConf[spark.hadoop.fs.s3a.secret.key] holds a credential" in _degraded(st)[2]
    wait_for(lambda: "InvalidSpec" in jobs.reasons("oldspec"), 30, "the InvalidSpec event")
    time.sleep(5)  # passes keep coming (the timer): still no driver
    assert drivers.max_seen == 0 and jobs.driver_pods("oldspec") == []
    seen = json.dumps(jobs.status("oldspec")) + json.dumps(jobs.events("oldspec"))
    assert secret_value not in seen


def _create_or_refused(jobs: Jobs, manifest: dict[str, Any]) -> bool:
    try:
        jobs.apply(manifest)
    except ApiException as err:
        if err.status == 422:  # the API server still serves the CRD with the rule
            return False
        raise
    return True
