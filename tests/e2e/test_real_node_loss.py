"""A lost node, on two real nodes: the driver's node goes NotReady and the job goes on on the other node.

One test bed with two real nodes (``REAL_BED_NODES = 2``: testbed.secondnode, each
with its own containerd and kubelet). The first driver is placed on the second node
(the first is cordoned while it is scheduled), then that node is lost in two ways:

- its kubelet hangs (SIGSTOP) while the driver's container runs on: the node controller
  marks the node NotReady after its grace period and evicts the driver after its
  toleration (``driverUnreachableSeconds``); the operator force-deletes the evicted pod,
  starts a replacement on the first node, and the old driver, still running, is fenced
  by the checkpoint's epoch and stops by itself, having written nothing more;
- the node is cut off (its kubelet hangs and the driver's container is frozen): the
  operator's own timer (``driverUnreachableSeconds``) replaces the driver before the
  node controller has even marked the node, and the replacement avoids the lost node,
  which the scheduler still sees as Ready.

Either way the output stays exactly once. The times (seconds from the loss to the
first new batch) are in docs/benchmarks/node-loss.md (``benchmarks/node_loss.py
--real``), not asserted here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed, imagestore
from testbed.secondnode import SecondNode
from testbed.waiting import wait_for

from streamjob_e2e import Jobs, Operator, assert_exactly_once, output_values, rate_job

REAL_BED_NODES = 2  # tests/conftest.py: a second real node

UNREACHABLE_SECONDS = 20


@dataclass
class Lost:
    """What a test of a lost node works with: its namespace (with the S3 Secret), jobs there, the second node."""

    jobs: Jobs
    core: client.CoreV1Api
    namespace: str
    second: SecondNode


@pytest.fixture
def lost(testbed: TestBed, core_v1: client.CoreV1Api, namespace: str, s3_secret: str, operator: Operator,
         jobs: Jobs) -> Iterator[Lost]:
    """The test's namespace with the S3 Secret and an operator; the second node thawed again at the end."""
    second = testbed.second_node
    assert second is not None
    try:
        yield Lost(jobs, core_v1, namespace, second)
    except BaseException:
        for pod in core_v1.list_namespaced_pod(namespace).items:
            print(f"--- pod {pod.metadata.name} on {pod.spec.node_name} ({pod.status.phase})")
        raise
    finally:
        second.thaw()  # a frozen driver's container too, so that its kubelet can end it
        wait_for(lambda: node_ready(core_v1, second.node_name), 120, f"{second.node_name} Ready again")


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    node = core.read_node(name)
    return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])


def start_on_second_node(bed: TestBed, jobs: Jobs, core: client.CoreV1Api, name: str, prefix: str) -> tuple[dict[str, Any], str]:
    """The job's first driver on the second node (the first node cordoned while it is scheduled); its status once it
    has committed 2 batches, and its container's id."""
    assert bed.second_node is not None
    job = rate_job(name, bed, prefix=prefix,
                   restartPolicy={"type": "FixedDelay", "delaySeconds": 0, "maxRestarts": 5,
                                  "driverUnreachableSeconds": UNREACHABLE_SECONDS})
    job["spec"]["image"] = imagestore.runtime_image()
    job["spec"]["s3"]["endpoint"] = bed.s3_endpoint_for_pods_and_host()
    core.patch_node(bed.node_name, {"spec": {"unschedulable": True}})
    try:
        jobs.apply(job)
        jobs.wait(name, "the first driver scheduled", lambda st: st.get("driverPod") == f"{name}-driver-1"
                  and core.read_namespaced_pod(f"{name}-driver-1", jobs.namespace).spec.node_name is not None, 120)
    finally:
        core.patch_node(bed.node_name, {"spec": {"unschedulable": False}})
    pod = core.read_namespaced_pod(f"{name}-driver-1", jobs.namespace)
    assert pod.spec.node_name == bed.second_node.node_name
    before = jobs.wait(name, "2 committed batches", lambda st: st.get("ready") is True
                       and (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 2, 420)
    container = core.read_namespaced_pod(f"{name}-driver-1", jobs.namespace).status.container_statuses[0].container_id
    return before, container.removeprefix("containerd://")


def fenced_in_log(node: SecondNode, namespace: str, pod: str) -> bool:
    """The driver's own log (its container's file on the second node, readable while its kubelet hangs) says it was fenced."""
    logs = list(node.pod_logs_dir.glob(f"{namespace}_{pod}_*/driver/*.log"))
    return any("exitCode=14" in path.read_text(errors="replace") for path in logs)


def replacement(jobs: Jobs, core: client.CoreV1Api, name: str, bed: TestBed) -> dict[str, Any]:
    st = jobs.wait_ready(name, driverPod=f"{name}-driver-2", timeout=420)
    assert core.read_namespaced_pod(f"{name}-driver-2", jobs.namespace).spec.node_name == bed.node_name
    return st


def test_a_driver_whose_kubelet_hangs_is_evicted_replaced_on_the_other_node_and_fenced(testbed: TestBed, lost: Lost) -> None:
    jobs, core, namespace, second = lost.jobs, lost.core, lost.namespace, lost.second
    prefix = f"real/{namespace}/hang"
    before, _ = start_on_second_node(testbed, jobs, core, "hang", prefix)

    second.stop_kubelet()
    # the node controller marks the node after its grace period (its taint then evicts the driver after its
    # toleration, driverUnreachableSeconds); the driver's container runs on meanwhile
    wait_for(lambda: not node_ready(core, second.node_name), 180, f"{second.node_name} NotReady")

    replaced = replacement(jobs, core, "hang", testbed)
    assert replaced["checkpointLocation"] == before["checkpointLocation"]
    forced = jobs.wait_event("hang", "DriverForceDeleted")
    assert "hang-driver-1" in forced[0] and "evicted" in forced[0], forced
    # the old driver ran on on the lost node until the replacement took the checkpoint; it stops at its next
    # commit, having written nothing more
    wait_for(lambda: fenced_in_log(second, namespace, "hang-driver-1"), 120, "the old driver fenced (exit 14 in its log)")
    done = jobs.wait("hang", "progress on the replacement",
                     lambda st: st["lastCheckpoint"]["batchId"] > before["lastCheckpoint"]["batchId"] + 2, 180)
    assert done["driverPod"] == "hang-driver-2"
    assert_exactly_once(output_values(testbed.s3_client(), prefix))


def test_a_driver_cut_off_with_its_node_is_replaced_before_the_node_is_marked_and_not_on_it(testbed: TestBed, lost: Lost) -> None:
    jobs, core, namespace, second = lost.jobs, lost.core, lost.namespace, lost.second
    prefix = f"real/{namespace}/cut"
    before, container = start_on_second_node(testbed, jobs, core, "cut", prefix)

    cut = time.monotonic()
    second.stop_kubelet()
    second.ctr("tasks", "pause", container)  # the driver's processes frozen: its endpoint answers nothing
    replaced = replacement(jobs, core, "cut", testbed)
    unreachable = jobs.wait_event("cut", "DriverUnreachable")
    assert "cut-driver-1" in unreachable[0] and second.node_name in unreachable[0], unreachable
    # the replacement was created while the scheduler could still have chosen the lost node: it preferred the other
    affinity = core.read_namespaced_pod("cut-driver-2", namespace).spec.affinity.node_affinity
    preferred = affinity.preferred_during_scheduling_ignored_during_execution
    assert preferred and preferred[0].preference.match_fields[0].values == [second.node_name], preferred
    print(f"replacement Ready {time.monotonic() - cut:.1f}s after the cut")
    done = jobs.wait("cut", "progress on the replacement",
                     lambda st: st["lastCheckpoint"]["batchId"] > before["lastCheckpoint"]["batchId"] + 2, 180)
    assert done["driverPod"] == "cut-driver-2" and replaced["totalRestarts"] == 1
    assert_exactly_once(output_values(testbed.s3_client(), prefix))
