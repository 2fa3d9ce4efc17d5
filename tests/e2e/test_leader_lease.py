"""The leader Lease against the test bed's real API server: two electors in this process, no Spark.

Both electors read one monotonic clock here, so the test can compare the
moment the old leader stopped acting with the moment the new one started.
The operator processes themselves are in test_two_replicas.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from kubernetes import client

from streamjob_operator.k8s.lease import LeaderElector, NotLeading
from streamjob_operator.k8s.lease_rules import Timings
from testbed.waiting import wait_for

TIMINGS = Timings.derive(3)  # renew deadline 2 s, retry 0.4 s


class Replica:
    def __init__(self, api: client.ApiClient, lease: str, identity: str) -> None:
        self.lost: list[str] = []
        self.elector = LeaderElector(api, "default", lease, identity, TIMINGS, on_lost=self.lost.append)

    def hang(self) -> None:
        """Its next call to the API server never returns (a partition): only the deadline watchdog can end it."""
        forever = threading.Event()
        self.elector.attempt = lambda: forever.wait() and False  # type: ignore[method-assign]


@pytest.fixture
def lease_name(kube_api: client.ApiClient) -> Iterator[str]:
    name = f"lease-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        client.CoordinationV1Api(kube_api).delete_namespaced_lease(name, "default")
    except client.ApiException:
        pass


def holder(kube_api: client.ApiClient, name: str) -> str | None:
    holder_identity: str | None = client.CoordinationV1Api(kube_api).read_namespaced_lease(name, "default").spec.holder_identity
    return holder_identity


def test_a_standby_takes_over_only_after_a_leader_whose_renewal_hangs_stopped_acting(kube_api: client.ApiClient, lease_name: str) -> None:
    a, b = Replica(kube_api, lease_name, "a"), Replica(kube_api, lease_name, "b")
    a.elector.start()
    assert a.elector.wait_until_leading()
    b.elector.start()
    wait_for(lambda: b.elector.connected(), 10, "b to read the Lease")
    assert not b.elector.leading()
    with pytest.raises(NotLeading):
        b.elector.ensure_leading()

    overlap: list[str] = []
    done = threading.Event()

    def watch() -> None:  # samples both: never two leaders (the assertion below is the exact one)
        while not done.is_set():
            if a.elector.leading() and b.elector.leading():
                overlap.append("both leading")
            done.wait(0.01)

    threading.Thread(target=watch, daemon=True).start()
    a.hang()
    wait_for(lambda: b.elector.leading(), 30, "b to take over")
    done.set()
    a_until = a.elector._until
    b_sent = b.elector._until - TIMINGS.renew_deadline  # b acts from the moment it sent the write that took the Lease
    assert a_until is not None and b_sent >= a_until + TIMINGS.margin - TIMINGS.retry_period, (a_until, b_sent)
    assert b_sent >= a_until, "b took the Lease while a could still act"
    assert not overlap
    assert holder(kube_api, lease_name) == "b"
    wait_for(lambda: a.lost, 10, "a to step down at its deadline")
    assert "renew-deadline" in a.lost[0] and b.lost == []
    b.elector.release()


def test_a_renew_time_from_a_skewed_clock_neither_keeps_nor_frees_the_lease(kube_api: client.ApiClient, lease_name: str) -> None:
    """A holder whose node's clock runs an hour ahead (its renewTime in our future) and then dies: the standby takes
    over after the lease duration on its own clock. (The previous comparison with renewTime waited an hour.)"""
    ahead = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.CoordinationV1Api(kube_api).create_namespaced_lease("default", {
        "metadata": {"name": lease_name},
        "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3, "acquireTime": ahead, "renewTime": ahead},
    })
    b = Replica(kube_api, lease_name, "b")
    b.elector.start()
    wait_for(lambda: b.elector.connected(), 10, "b to read the Lease")
    assert not b.elector.leading()
    assert b.elector.wait_until_leading()
    assert holder(kube_api, lease_name) == "b"
    seen = b.elector._seen
    lease = client.CoordinationV1Api(kube_api).read_namespaced_lease(lease_name, "default")
    assert seen is not None and lease.spec.lease_transitions == 1
    b.elector.release()


def test_a_released_lease_is_taken_at_the_next_round_not_after_expiry(kube_api: client.ApiClient, lease_name: str) -> None:
    slow = Timings.derive(60)  # expiry would take a minute; the handover must not
    a = LeaderElector(kube_api, "default", lease_name, "a", slow, on_lost=lambda why: None)
    b = LeaderElector(kube_api, "default", lease_name, "b", Timings.derive(60, 40, 0.5), on_lost=lambda why: None)
    a.start()
    assert a.wait_until_leading()
    b.start()
    wait_for(lambda: b.connected(), 10, "b to read the Lease")
    a.release()
    with pytest.raises(NotLeading):
        a.ensure_leading()
    wait_for(lambda: b.leading(), 15, "b to take the released Lease")
    assert holder(kube_api, lease_name) == "b"
    b.release()
    wait_for(lambda: not holder(kube_api, lease_name), 10, "the Lease released by b")
