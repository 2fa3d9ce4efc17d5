"""The Helm chart installs an operator that runs a job under least privilege.

The operator runs as a pod of the chart's Deployment (the built operator image,
the chart's default), in a namespace that enforces the `restricted` Pod Security
Standard, under the chart's
namespaced RBAC (a Role in the watched namespace only); the job's driver runs
under the chart's `streamjob-driver` ServiceAccount and starts a real executor
pod through the API server, both from the built runtime image. With RBAC on, this
proves the grants are enough.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

from kubernetes import client
from streamjob_e2e import IMAGE, REPO, Jobs, assert_runs_in_image, rate_job

from testbed import TestBed, imagestore, locate
from testbed.waiting import wait_for
from streamjob_contract.lifecycle import LifecycleState



def helm(testbed: TestBed, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(locate.helm()), f"--kubeconfig={testbed.kubeconfig}", *args],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result


def test_the_chart_runs_a_job_with_executors_under_least_privilege(testbed, crd, kube_api, namespace, s3_secret, s3, built_images):
    release_ns = f"streamjob-system-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(kube_api)
    # the operator's own pod passes the restricted Pod Security Standard (the API server's admission refuses it otherwise)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=release_ns, labels={
        "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"})))
    helm(testbed, "install", "streamjob", str(REPO / "charts" / "streamjob"), "--namespace", release_ns,
         "--set", f"watchNamespaces={{{namespace}}}", "--wait", "--timeout", "240s")
    try:
        operator_pods = core.list_namespaced_pod(release_ns, label_selector="app.kubernetes.io/name=streamjob-operator").items
        assert [p.status.phase for p in operator_pods] == ["Running"]
        assert operator_pods[0].spec.containers[0].image == imagestore.operator_image()
        assert_runs_in_image(testbed, release_ns, operator_pods[0].metadata.name, uid=65532)
        # namespaced install: nothing cluster-wide beyond read access to CRDs and namespaces
        rbac = client.RbacAuthorizationV1Api(kube_api)
        roles = rbac.list_namespaced_role(namespace, label_selector="app.kubernetes.io/instance=streamjob").items
        assert {r.metadata.name for r in roles} == {"streamjob-operator", "streamjob-driver"}
        cluster_rules = rbac.read_cluster_role(f"streamjob-operator-{release_ns}-crds").rules
        assert all(set(rule.verbs) <= {"get", "list", "watch"} for rule in cluster_rules)

        jobs = Jobs(kube_api, namespace)
        prefix = f"helm-{uuid.uuid4().hex[:6]}"
        jobs.apply(rate_job("helm-job", testbed, prefix=prefix, serviceAccountName="streamjob-driver", image=IMAGE,
                            executor={"instances": 1, "memory": "512m"}))
        status = jobs.wait("helm-job", "ready with a completed batch",
                           lambda st: st.get("ready") is True and (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
        assert status["state"] == LifecycleState.running
        driver = jobs.driver_pods("helm-job")[0]
        assert driver.spec.service_account_name == "streamjob-driver"

        def executors() -> list[client.V1Pod]:
            pods = core.list_namespaced_pod(namespace, label_selector="spark-role=executor").items
            return [p for p in pods if any(o.name == driver.metadata.name for o in p.metadata.owner_references or [])]

        # Spark asked the API server for an executor, owned by the driver pod, and it ran
        running = wait_for(lambda: [p for p in executors() if p.status.phase == "Running"], 120, "a running executor pod")
        assert running[0].spec.containers[0].image == driver.spec.containers[0].image
        assert_runs_in_image(testbed, namespace, driver.metadata.name)
        assert_runs_in_image(testbed, namespace, running[0].metadata.name)
        assert ("DriverCreated" in jobs.reasons("helm-job")), jobs.events("helm-job")

        jobs.delete("helm-job")
        wait_for(lambda: not jobs.driver_pods("helm-job") and not executors(), 180, "driver and executors gone after delete")
    finally:
        helm(testbed, "uninstall", "streamjob", "--namespace", release_ns, "--wait", "--timeout", "120s")
        core.delete_namespace(release_ns)


def test_chart_renders_for_both_scopes(testbed, tmp_path: Path):
    cluster = helm(testbed, "template", "t", str(REPO / "charts" / "streamjob"), "--namespace", "ops").stdout
    assert re.search(r"^kind: ClusterRole$", cluster, flags=re.M) and "--all-namespaces" in cluster
    scoped = helm(testbed, "template", "t", str(REPO / "charts" / "streamjob"), "--namespace", "ops",
                  "--set", "watchNamespaces={a,b}").stdout
    roles = re.findall(r"^kind: Role$", scoped, flags=re.M)
    assert len(roles) == 5  # operator + driver Role in each of a and b, the leader Lease's in ops
    assert "--namespace=a" in scoped and "--namespace=b" in scoped and "--all-namespaces" not in scoped
