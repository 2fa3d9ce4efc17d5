"""The StreamJob of examples/minimal.yaml on the node: its driver a real container of the released runtime image's
name, its checkpoint in S3, a restart from it after the container is killed.

The operator runs on the host, as in the other e2e tests, against the test bed's admin kubeconfig (the API server
at the bridge's loopback alias, testbed.podnet); the driver reaches S3 through the ``s3`` Service and the API
server through the ``kubernetes`` Service.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from kubernetes import client

from testbed import TestBed, imagestore

from streamjob_e2e import CORE_REQUEST, REPO, Jobs, Operator, assert_runs_in_image, kill_driver_process

IMAGE = imagestore.runtime_image()


@pytest.fixture(scope="module", autouse=True)
def image_built() -> None:
    assert imagestore.inspect(IMAGE) is not None, f"{IMAGE} was not built: bash scripts/build-images.sh"


def minimal_job(name: str, bed: TestBed, prefix: str) -> dict[str, Any]:
    """examples/minimal.yaml with the runtime image, S3 as pods and the host operator reach it, no executor pods
    (the driver's local master), 2 state partitions."""
    manifests = list(yaml.safe_load_all((REPO / "examples" / "minimal.yaml").read_text()))
    job: dict[str, Any] = next(m for m in manifests if m["kind"] == "StreamJob")
    job["metadata"] = {"name": name}
    spec = job["spec"]
    spec["image"] = IMAGE
    spec["checkpoint"] = {"location": f"s3a://streamjob/{prefix}/checkpoint", "triggerInterval": "2 seconds"}
    # the operator runs on the host and reads the checkpoint too: an endpoint both reach (the bridge's address)
    spec["s3"]["endpoint"] = bed.s3_endpoint_for_pods_and_host()
    spec["s3"]["credentialsSecret"] = {"name": "s3"}
    spec["job"]["pipeline"]["sink"]["path"] = f"s3a://streamjob/{prefix}/output"
    spec["executor"] = {"instances": 0, "memory": "512m", "coreRequest": CORE_REQUEST}
    spec["driver"] = {"memory": "512m", "coreRequest": CORE_REQUEST}
    spec["statePartitions"] = 2  # the window counts' state in 2 partitions, not Spark's 200: seconds per batch on 1 core
    spec["restartPolicy"] = {"type": "ExponentialBackoff", "delaySeconds": 1, "maxDelaySeconds": 5, "maxRestarts": 5}
    return job


def batch_id(st: dict[str, Any]) -> int:
    return int((st.get("lastCheckpoint") or {}).get("batchId", -1))


def test_a_streamjob_runs_in_a_real_container_checkpoints_to_s3_and_restarts_from_it_after_a_kill(
    testbed: TestBed, core_v1: client.CoreV1Api, namespace: str, s3_secret: str, operator: Operator, jobs: Jobs, s3: Any,
) -> None:
    core = core_v1
    prefix = f"real/{namespace}"
    try:
        applied = time.monotonic()
        jobs.apply(minimal_job("minimal", testbed, prefix))

        first = jobs.wait("minimal", "Ready with a committed batch",
                          lambda st: st.get("ready") is True and st.get("state") == "Running" and batch_id(st) >= 0, 240)
        print(f"first driver Ready with batch {batch_id(first)} {time.monotonic() - applied:.1f}s after apply")
        assert first["driverPod"] == "minimal-driver-1"
        driver = core.read_namespaced_pod("minimal-driver-1", namespace)
        container_id = driver.status.container_statuses[0].container_id
        assert container_id.startswith("containerd://"), container_id
        assert driver.status.pod_ip.startswith("10.244.0."), driver.status.pod_ip
        assert driver.spec.node_name == testbed.node_name
        # the checkpoint is in the test bed's S3, written by the pod through the s3 Service
        commits = s3.list_objects_v2(Bucket="streamjob", Prefix=f"{prefix}/checkpoint/").get("Contents", [])
        assert any("/commits/" in o["Key"] for o in commits), [o["Key"] for o in commits][:20]

        # the container runs in its image's mount namespace as the image's user (185)
        assert_runs_in_image(testbed, namespace, "minimal-driver-1")

        # SIGKILL the driver's container (every process of its task in containerd): the pod fails, the operator
        # starts a new driver from the latest completed checkpoint, and the batch id never goes back
        before = batch_id(jobs.status("minimal"))
        kill_driver_process(testbed, namespace, "minimal-driver-1")
        killed = time.monotonic()
        restarted = jobs.wait("minimal", "Ready on a second driver",
                              lambda st: st.get("driverPod") == "minimal-driver-2" and st.get("ready") is True
                              and st.get("state") == "Running", 240)
        print(f"second driver Ready with batch {batch_id(restarted)} {time.monotonic() - killed:.1f}s after the kill")
        assert restarted["totalRestarts"] == 1
        assert restarted["checkpointLocation"] == first["checkpointLocation"]
        failed = [m for r, m in jobs.events("minimal") if r == "DriverFailed"]
        assert failed and "exit 137" in failed[0], jobs.events("minimal")
        assert batch_id(restarted) >= before
        after = jobs.wait("minimal", "progress past the pre-kill batch", lambda st: batch_id(st) > before, 120)
        second = core.read_namespaced_pod("minimal-driver-2", namespace).status.container_statuses[0].container_id
        assert second.startswith("containerd://") and second != container_id
        assert batch_id(after) > before
        assert "S3Error" not in jobs.reasons("minimal"), jobs.events("minimal")
    except BaseException:
        for pod in core.list_namespaced_pod(namespace).items:
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=60, _preload_content=False).data
            print(f"--- pod {pod.metadata.name} ({pod.status.phase}) log tail ---\n{log.decode(errors='replace')}")
        raise
