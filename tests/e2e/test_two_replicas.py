"""Two live operator replicas on one Lease against the test bed: one job converges whatever happens to the leader.

Standbys are started together with the first leader, each reaching the API
server through its own TCP proxy (ha_replicas.Partition). The leader is then
killed (SIGKILL), frozen (SIGSTOP) past its lease and thawed, or cut off from
the API server, at a chosen moment: after a manual savepoint was requested,
after an upgrade's savepoint was requested, or while the upgraded driver
starts. Each time a standby takes over and finishes what was started; a
replica that lost the Lease exits, and the API server's audit log shows no
write of it once another replica took the Lease; never two drivers at
once (DriverCounter); and every standby's liveness endpoint answers
throughout, so a kubelet never restarts it.

The default run takes one fault of each kind (kill mid-upgrade, freeze and
partition while the upgraded driver starts); the slow run adds every fault at
every moment.
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

from streamjob_operator.health import READINESS_PATH, parse_endpoint
from streamjob_operator.k8s.lease_rules import Timings
from streamjob_operator.main import KOPF_ANSWER_SECONDS, build_parser
from testbed import TestBed

from test_chart_networkpolicy import render
from ha_replicas import HealthWatch, Replica, Replicas
from rbac_audit import requests
from streamjob_e2e import (
    DEV_IMAGE,
    START_TIMEOUT,
    DriverCounter,
    Jobs,
    JobWatch,
    assert_exactly_once,
    output_values,
    rate_job,
    savepoint_manifest,
)


WRITES = {"create", "update", "patch", "delete", "deletecollection"}
KILL, FREEZE, CUT = "kill", "freeze", "cut"


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


def requested(kind: str) -> Any:
    """The operation of this kind has asked the driver for its savepoint (the id is recorded).

    A state that lasts as long as the savepoint: it is taken from the watch's record (JobWatch), which has
    every status write, so the wait cannot miss it however quick the savepoint; the fault follows at once,
    and may land a little later in the operation, which the convergence asserted afterwards covers too."""
    return lambda st: (st.get("operation") or {}).get("kind") == kind and bool((st.get("operation") or {}).get("triggerId"))


def assert_no_write_after_takeover(testbed: TestBed, replicas: Replicas, old: Replica) -> None:
    """The API server received no write from ``old`` once the new leader had taken the Lease (its acquireTime).

    Read from the API server's audit log, where each replica is a user of its own: what reached the server,
    not what the replica logged (a write sent before a freeze may log its answer after the thaw). A Lease
    write is allowed only as a refused one (409): the Lease is the one object whose writes the API server
    itself fences (resourceVersion)."""
    lease = replicas.leases.read_namespaced_lease(replicas.lease, "default")
    taken = lease.spec.acquire_time
    written = [q for q in requests(testbed.audit_log, {old.user}, taken)
               if q.verb in WRITES and not (q.resource == "leases" and q.code == 409)]
    assert not written, f"{old} wrote after {lease.spec.holder_identity} took the Lease at {taken}: {written}"


def fail_leader(testbed: TestBed, replicas: Replicas, health: HealthWatch, old: Replica, fault: str) -> Replica:
    """Kills, freezes (then thaws) or cuts off the leader; returns the standby that took over."""
    health.unwatch(old)
    if fault == KILL:
        old.signal(signal.SIGKILL)
        return replicas.wait_new_leader(old)
    if fault == FREEZE:
        old.signal(signal.SIGSTOP)
        new = replicas.wait_new_leader(old)
        old.signal(signal.SIGCONT)  # it wakes past its deadline: it must step down before any write
    else:
        old.partition.cut()
        new = replicas.wait_new_leader(old)
    replicas.wait_stepped_down(old, timeout=30)
    assert replicas.holder() == new.identity
    assert_no_write_after_takeover(testbed, replicas, old)
    return new


def converge_through(faults: list[tuple[str, str]], testbed: TestBed, replicas: Replicas, health: HealthWatch, jobs: Jobs,
                     s3: Any, namespace: str) -> None:
    """Runs one job and applies each (moment, fault) to the leader of the moment, in order."""
    started = replicas.start(*"abcdefghij"[:len(faults) + 1])  # one replica for each fault, and one to finish
    for replica in started:
        health.watch(replica)
    leader = replicas.wait_new_leader(None)
    for replica in started:
        if replica is not leader:
            replicas.wait_standby(replica)

    prefix = f"e2e/{namespace}/ha"
    jobs.apply(rate_job("ha", testbed, prefix=prefix))
    jobs.wait_ready("ha", driverPod="ha-driver-1")
    jobs.wait("ha", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
    driver, image, manual = 1, DEV_IMAGE, None
    with JobWatch(jobs.custom.api_client, namespace) as history:  # every status write from here on
        for n, (moment, fault) in enumerate(faults, start=1):
            since = len(history.versions("ha"))
            if moment == "mid-savepoint":
                jobs.patch("ha", {"savepointNonce": n})
                history.recorded("ha", "with the manual savepoint requested", requested("savepoint"),
                                 timeout=START_TIMEOUT, since=since)
            elif moment == "mid-upgrade":
                driver, image = driver + 1, DEV_IMAGE.replace("0.1.0", f"0.1.{n}")
                jobs.patch("ha", {"image": image})
                history.recorded("ha", "with the upgrade's savepoint requested", requested("upgrade"),
                                 timeout=START_TIMEOUT, since=since)
            leader = fail_leader(testbed, replicas, health, leader, fault)
            if moment == "mid-savepoint":
                done = jobs.wait("ha", "the manual savepoint completed by the new leader",
                                 lambda st: ((st.get("lastSavepoint") or {}).get("trigger") == "manual"
                                             and st["lastSavepoint"]["path"] != manual and st.get("operation") is None),
                                 timeout=120)
                manual = done["lastSavepoint"]["path"]
                assert savepoint_manifest(s3, manual) is not None
            elif moment == "mid-upgrade":
                jobs.wait("ha", "the upgraded driver created by the new leader",
                          lambda st: st.get("driverPod") == f"ha-driver-{driver}", timeout=120)

    final = jobs.wait_ready("ha", driverPod=f"ha-driver-{driver}")
    assert json.loads(final["lastStableSpec"])["image"] == image
    assert final["totalRestarts"] == 0 and final.get("reconcileError") is None
    if driver > 1:
        assert final["lastSavepoint"]["trigger"] == "upgrade" and final["restoredFrom"] == final["lastSavepoint"]["path"]
        # the event is sent after the status write of the same pass: wait for it
        jobs.wait_event("ha", "UpgradeCompleted", timeout=60)
    jobs.wait("ha", "progress after the last fault",
              lambda st: st["lastCheckpoint"]["batchId"] > final["lastCheckpoint"]["batchId"] + 1)
    assert health.probes > 0
    assert_exactly_once(output_values(s3, prefix))  # the output committed so far (the sink's log is complete per batch)


def test_two_replicas_converge_through_a_kill_mid_upgrade_then_a_freeze_and_a_partition_of_the_leader(
    testbed: TestBed, replicas: Replicas, health: HealthWatch, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any,
    namespace: str,
) -> None:
    faults = [("mid-upgrade", KILL), ("driver-starting", FREEZE), ("driver-starting", CUT)]
    converge_through(faults, testbed, replicas, health, jobs, s3, namespace)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # eight faults, each a convergence of its own: past the 900 s default on a loaded machine
def test_two_replicas_converge_through_every_fault_at_every_moment(
    testbed: TestBed, replicas: Replicas, health: HealthWatch, jobs: Jobs, drivers: DriverCounter, s3_secret: str, s3: Any,
    namespace: str,
) -> None:
    faults = [(moment, fault) for moment in ("mid-savepoint", "mid-upgrade") for fault in (KILL, FREEZE, CUT)]
    converge_through(faults + [("driver-starting", FREEZE), ("driver-starting", CUT)], testbed, replicas, health, jobs, s3,
                     namespace)


def test_the_chart_probes_what_every_replica_serves_from_its_start() -> None:
    """The chart's probes hit the endpoints the operator serves from process start (standby included, as the test
    above shows), its liveness timeout leaves room for the kopf check, and its lease timings are accepted."""
    (deployment,) = [d for d in render("replicas=2") if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    host, port, live_path = parse_endpoint(args.liveness)
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["health"] == port
    for probe, path in (("startupProbe", live_path), ("livenessProbe", live_path), ("readinessProbe", READINESS_PATH)):
        assert container[probe]["httpGet"] == {"path": path, "port": "health"}, (probe, container[probe])
    assert container["livenessProbe"]["timeoutSeconds"] > KOPF_ANSWER_SECONDS
    timings = Timings.derive(args.lease_seconds, args.renew_deadline_seconds, args.retry_period_seconds)
    assert (timings.lease_seconds, timings.renew_deadline, timings.retry_period) == (15, 10, 2)
