"""Two live operator replicas on one Lease against the test bed: one job converges whatever happens to the leader.

The leader is killed (SIGKILL) after a savepoint was requested and after an
upgrade's savepoint was requested, frozen (SIGSTOP) past its lease and thawed,
and cut off from the API server. Each time the standby takes over and finishes
what was started; the replica that lost the Lease exits without another write;
never two drivers at once (DriverCounter); and every standby's liveness
endpoint answers throughout, so a kubelet never restarts it.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed
from testbed.waiting import wait_for

from ha_replicas import HealthWatch, Partition, Replica, Replicas
from streamjob_e2e import IMAGE, DriverCounter, Jobs, assert_exactly_once, output_values, rate_job, savepoint_manifest

NEW_IMAGE = IMAGE.replace("0.1.0", "0.1.1")
WRITES = ("Created driver pod", "Deleted driver pod", "Triggered savepoint", "Recorded event", "Created token secret",
          "Pruned savepoint", "Cleared reconcile error")


@pytest.fixture
def replicas(testbed: TestBed, crd: None, kube_api: client.ApiClient, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[Replicas]:
    group = Replicas(testbed, kube_api, tmp_path, lease=f"streamjob-ha-{uuid.uuid4().hex[:6]}")
    yield group
    group.stop()
    if request.session.testsfailed:
        for replica in group.all:
            print(f"--- {replica} log {replica.log_path} (tail) ---\n{replica.log()[-4000:]}")


@pytest.fixture
def health() -> Iterator[HealthWatch]:
    watch = HealthWatch()
    yield watch
    watch.close()
    assert not watch.failures, watch.failures


@pytest.fixture
def partition(testbed: TestBed, tmp_path: Path) -> Iterator[Partition]:
    proxy = Partition(testbed, tmp_path)
    yield proxy
    proxy.close()


def requested(kind: str) -> Any:
    """The operation of this kind has asked the driver for its savepoint (the id is recorded)."""
    return lambda st: (st.get("operation") or {}).get("kind") == kind and bool((st.get("operation") or {}).get("triggerId"))


def manual_savepoint_after(previous: str | None) -> Any:
    return lambda st: ((st.get("lastSavepoint") or {}).get("trigger") == "manual"
                       and st["lastSavepoint"]["path"] != previous and st.get("operation") is None)


def standby(replicas: Replicas, health: HealthWatch, name: str, kubeconfig: Path | None = None) -> Replica:
    replica = replicas.start(name, kubeconfig)
    health.watch(replica)
    replicas.wait_standby(replica)
    return replica


def take_over(replicas: Replicas, health: HealthWatch, old: Replica, new: Replica, how: signal.Signals) -> None:
    health.unwatch(old)
    old.signal(how)
    replicas.wait_leader(new)


def assert_no_write_after(log: str, mark: int) -> None:
    after = log[mark:]
    written = [line for line in after.splitlines() if any(w in line for w in WRITES)]
    assert not written, f"the replica wrote after losing the Lease: {written}"


def test_two_replicas_converge_through_kills_a_freeze_and_a_partition_of_the_leader(
    testbed: TestBed, replicas: Replicas, health: HealthWatch, partition: Partition, jobs: Jobs, drivers: DriverCounter,
    s3_secret: str, s3: Any, namespace: str,
) -> None:
    """One job, two Spark starts: the freeze and the partition happen while the upgraded driver starts."""
    a = replicas.start("a")
    health.watch(a)
    replicas.wait_leader(a)
    b = standby(replicas, health, "b")

    prefix = f"e2e/{namespace}/ha"
    jobs.apply(rate_job("ha", testbed, prefix=prefix))
    jobs.wait_ready("ha", driverPod="ha-driver-1")
    jobs.wait("ha", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)

    # SIGKILL mid-savepoint: the request is recorded; b finds it in status and finishes it
    jobs.patch("ha", {"savepointNonce": 1})
    jobs.wait("ha", "the manual savepoint requested", requested("savepoint"), timeout=60)
    take_over(replicas, health, a, b, signal.SIGKILL)
    manual = jobs.wait("ha", "the manual savepoint completed by b", manual_savepoint_after(None), timeout=120)["lastSavepoint"]
    assert savepoint_manifest(s3, manual["path"]) is not None

    # SIGKILL mid-upgrade, after the upgrade's savepoint was requested: c carries the upgrade on
    c = standby(replicas, health, "c")
    jobs.patch("ha", {"image": NEW_IMAGE})
    jobs.wait("ha", "the upgrade's savepoint requested", requested("upgrade"), timeout=60)
    take_over(replicas, health, b, c, signal.SIGKILL)
    jobs.wait("ha", "the upgraded driver created by c", lambda st: st.get("driverPod") == "ha-driver-2", timeout=120)

    # SIGSTOP past the lease while the new driver starts: d takes over; c, thawed, steps down without a single write
    d = standby(replicas, health, "d")
    take_over(replicas, health, c, d, signal.SIGSTOP)
    mark = len(c.log())
    c.signal(signal.SIGCONT)
    assert_no_write_after(replicas.wait_stepped_down(c), mark)
    assert replicas.holder() == d.identity

    # a partition: e reaches the API server only through the proxy; once e leads, the proxy is cut and f takes over
    e = standby(replicas, health, "e", kubeconfig=partition.kubeconfig)
    take_over(replicas, health, d, e, signal.SIGKILL)
    f = standby(replicas, health, "f")
    health.unwatch(e)
    mark = len(e.log())
    partition.cut()
    replicas.wait_leader(f)
    assert_no_write_after(replicas.wait_stepped_down(e, timeout=30), mark)

    upgraded = jobs.wait_ready("ha", driverPod="ha-driver-2")
    assert upgraded["lastSavepoint"]["trigger"] == "upgrade" and upgraded["restoredFrom"] == upgraded["lastSavepoint"]["path"]
    assert json.loads(upgraded["lastStableSpec"])["image"] == NEW_IMAGE
    assert upgraded["totalRestarts"] == 0 and upgraded.get("reconcileError") is None
    assert "UpgradeCompleted" in jobs.reasons("ha")
    jobs.wait("ha", "progress after the upgrade",
              lambda st: st["lastCheckpoint"]["batchId"] > upgraded["lastSavepoint"]["batchId"] + 1)
    assert health.probes > 0
    assert_exactly_once(output_values(s3, prefix))  # the output committed so far (the sink's log is complete per batch)
