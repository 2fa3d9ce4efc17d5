"""A job in a namespace that enforces the `restricted` Pod Security Standard, with a pod template.

The test bed's API server runs the real PodSecurity admission: a pod without
the restricted settings is refused there (checked first, so the test cannot
pass with the admission off). Then a job with one executor and a pod template
(nodeSelector, toleration, sidecar, volume, label, annotation) is deployed from
the built runtime image, commits batches, is upgraded with a savepoint to the
image's next tag and deleted; the driver and the executor pods of both runs are
admitted, carry the template and run inside the image (as its non-root user).
"""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_e2e import IMAGE, DriverCounter, Jobs, Operator, assert_runs_in_image, rate_job



def template(sidecar_image: str) -> dict[str, Any]:
    """The pod template: labels, a nodeSelector every test bed node matches, a toleration, a volume and a sidecar."""
    return {
        "metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/owner": "payments"}},
        "spec": {
            "nodeSelector": {"streamjob.dev/testbed": "true"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
            "containers": [
                {"name": "main", "volumeMounts": [{"name": "scratch", "mountPath": "/tmp/streamjob-scratch"}]},
                {"name": "log-shipper", "image": sidecar_image, "command": ["sleep", "3600"]},
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


def restrict(core: client.CoreV1Api, namespace: str) -> None:
    core.patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}}})
    plain = client.V1Pod(metadata=client.V1ObjectMeta(name="plain"),
                         spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]))

    def refused() -> str | None:
        try:
            core.create_namespaced_pod(namespace, plain, dry_run="All")
        except ApiException as err:
            return err.body if err.status == 403 and "violates PodSecurity" in (err.body or "") else None
        return None

    message = wait_for(refused, 30, "the namespace to refuse a pod without the restricted settings")
    assert "allowPrivilegeEscalation" in message and "runAsNonRoot" in message


def assert_templated(pod: client.V1Pod, main: str) -> None:
    assert pod.metadata.labels["team"] == "payments" and pod.metadata.annotations["example.com/owner"] == "payments"
    assert pod.spec.node_selector == {"streamjob.dev/testbed": "true"}
    assert [(t.key, t.value, t.effect) for t in pod.spec.tolerations or [] if t.key == "dedicated"] == [("dedicated", "spark", "NoSchedule")]
    assert pod.spec.security_context.run_as_non_root and pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    containers = {c.name: c for c in pod.spec.containers}
    assert set(containers) == {main, "log-shipper"}, list(containers)
    assert "/tmp/streamjob-scratch" in [m.mount_path for m in containers[main].volume_mounts]
    assert any(v.name == "scratch" and v.empty_dir is not None for v in pod.spec.volumes)
    for c in containers.values():
        assert c.security_context.allow_privilege_escalation is False and c.security_context.capabilities.drop == ["ALL"]


def test_a_restricted_namespace_runs_the_lifecycle_with_a_pod_template(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str,
    namespace: str, core_v1: client.CoreV1Api, built_images: str,
) -> None:
    restrict(core_v1, namespace)
    prefix = f"e2e/{namespace}/pss-{uuid.uuid4().hex[:4]}"
    jobs.apply(rate_job("pss", testbed, prefix=prefix, image=IMAGE, podTemplate=template(testbed.busybox_image()), executor={"instances": 1, "memory": "512m"}))

    def executors(driver: str) -> list[client.V1Pod]:
        pods = core_v1.list_namespaced_pod(namespace, label_selector="spark-role=executor").items
        return [p for p in pods if any(o.name == driver for o in p.metadata.owner_references or [])]

    # deploy: a committed batch needs the executor, so both pods were admitted
    jobs.wait("pss", "a committed batch", lambda st: st.get("ready") is True and (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
    assert_templated(jobs.driver_pods("pss")[0], "driver")
    executor = wait_for(lambda: [p for p in executors("pss-driver-1") if p.status.phase == "Running"], 120, "a running executor")[0]
    assert_templated(executor, "executor")
    assert executor.metadata.annotations["kubectl.kubernetes.io/default-container"] == "executor"
    assert_runs_in_image(testbed, namespace, "pss-driver-1", container="driver")
    assert_runs_in_image(testbed, namespace, executor.metadata.name, container="executor")

    # savepoint upgrade: the new driver and its executor are admitted too and resume from the savepoint
    jobs.patch("pss", {"image": IMAGE.replace("0.1.0", "0.1.1")})
    upgraded = jobs.wait_ready("pss", driverPod="pss-driver-2")
    assert upgraded["lastSavepoint"]["trigger"] == "upgrade" and upgraded["restoredFrom"] == upgraded["lastSavepoint"]["path"]
    # ready means this driver's query completed a batch, which needs its executor
    wait_for(lambda: [p for p in executors("pss-driver-2") if p.status.phase == "Running"], 60, "a running executor of the new driver")
    refused = [m for r, m in jobs.events("pss") if "forbidden" in m.lower()]
    assert not refused, refused

    # delete: driver and executors go
    jobs.delete("pss")
    wait_for(lambda: not jobs.driver_pods("pss") and not executors("pss-driver-2"), 180, "driver and executors gone after delete")
