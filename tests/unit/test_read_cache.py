"""The operator's read cache (k8s.cache.ReadCache): newest version wins, deletions stay deleted, a job's pods
come from the cache only after a LIST and not right after the operator's own pod mutation."""

from __future__ import annotations

from typing import Any

from streamjob_operator.k8s.cache import ReadCache, slim_pod
from streamjob_operator.reconcile.observe import driver_pod


def job(rv: int | str, state: str = "Running", name: str = "wc") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}, "status": {"state": state}}


def pod(name: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


def names(pods: list[dict[str, Any]] | None) -> list[str] | None:
    return None if pods is None else sorted(p["metadata"]["name"] for p in pods)


def test_a_job_body_is_replaced_only_by_a_newer_version() -> None:
    cache = ReadCache()
    assert cache.job("ns", "wc") is None
    cache.saw_job(job(10, "Deploying"))
    cache.saw_job(job(12, "Running"))  # e.g. the response of the operator's own status write
    cache.saw_job(job(11, "Deploying"))  # the watch event of an older version, late
    body = cache.job("ns", "wc")
    assert body is not None and body["status"]["state"] == "Running"


def test_a_deleted_job_is_not_resurrected_by_a_late_event_but_a_new_one_is_seen() -> None:
    cache = ReadCache()
    cache.saw_job(job(10))
    cache.saw_job(job(15), deleted=True)
    cache.saw_job(job(14))
    assert cache.job("ns", "wc") is None
    cache.saw_job(job(20, "Deploying"))  # created again under the same name
    assert cache.job("ns", "wc") is not None


def test_a_version_that_is_not_an_integer_is_never_cached() -> None:
    cache = ReadCache()
    cache.saw_job(job("abc"))
    assert cache.job("ns", "wc") is None


def test_pods_need_one_list_then_follow_the_watch() -> None:
    cache = ReadCache()
    cache.saw_pod("wc", pod("wc-driver-1", 5))
    assert cache.pods("ns", "wc") is None  # never listed: only a LIST can say what exists
    cache.listed("ns", "wc", [pod("wc-driver-1", 5)], "6")
    assert names(cache.pods("ns", "wc")) == ["wc-driver-1"]
    cache.saw_pod("wc", pod("wc-driver-2", 9))
    cache.saw_pod("wc", pod("wc-driver-1", 10), deleted=True)
    assert names(cache.pods("ns", "wc")) == ["wc-driver-2"]
    cache.saw_pod("wc", pod("wc-driver-1", 8))  # a late MODIFIED of the deleted pod
    assert names(cache.pods("ns", "wc")) == ["wc-driver-2"]


def test_a_list_drops_what_it_lacks_when_older_and_keeps_what_the_watch_saw_after_it() -> None:
    cache = ReadCache()
    cache.saw_pod("wc", pod("wc-driver-1", 5))
    cache.saw_pod("wc", pod("wc-driver-3", 30))  # created after the list's snapshot
    cache.listed("ns", "wc", [pod("wc-driver-2", 12)], "20")
    assert names(cache.pods("ns", "wc")) == ["wc-driver-2", "wc-driver-3"]


def test_the_operators_own_pod_mutation_makes_the_next_read_list() -> None:
    cache = ReadCache()
    cache.listed("ns", "wc", [], "3")
    assert cache.pods("ns", "wc") == []
    cache.touched("ns", "wc")
    assert cache.pods("ns", "wc") is None
    cache.listed("ns", "wc", [pod("wc-driver-1", 4)], "4")
    assert names(cache.pods("ns", "wc")) == ["wc-driver-1"]


def test_jobs_do_not_share_pods_and_forget_drops_one_job() -> None:
    cache = ReadCache()
    cache.listed("ns", "a", [pod("a-driver-1", 2)], "3")
    cache.listed("ns", "b", [pod("b-driver-1", 2)], "3")
    cache.forget("ns", "a")
    assert cache.pods("ns", "a") is None
    assert names(cache.pods("ns", "b")) == ["b-driver-1"]


def test_bodies_are_kept_without_managed_fields_and_the_callers_bodies_are_not_changed() -> None:
    cache = ReadCache()
    fields = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {}}}]
    watched_job, watched_pod = job(10), pod("wc-driver-1", 11)
    for body in (watched_job, watched_pod):
        body["metadata"]["managedFields"] = fields
        body["metadata"]["labels"] = {"streamjob.io/job": "wc"}
    cache.saw_job(watched_job)
    cache.listed("ns", "wc", [watched_pod], "11")
    kept_job, kept_pods = cache.job("ns", "wc"), cache.pods("ns", "wc")
    assert kept_job is not None and kept_pods is not None
    for kept, original in ((kept_job, watched_job), (kept_pods[0], watched_pod)):
        assert "managedFields" not in kept["metadata"]
        assert kept["metadata"]["labels"] == {"streamjob.io/job": "wc"} and kept["metadata"]["resourceVersion"]
        assert original["metadata"]["managedFields"] == fields  # kopf's copy of the event, untouched


def test_a_cached_driver_pod_reads_as_the_pod_it_came_from() -> None:
    """Only metadata, status and the node are kept of a pod: observe.driver_pod, the reader, gets the same answer."""
    terminated = {"exitCode": 137, "reason": "Error", "message": "last output: batch 7 committed"}
    full = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "ns", "name": "wc-driver-3", "resourceVersion": "40", "deletionTimestamp": "2026-03-01T12:00:00Z",
                     "labels": {"streamjob.io/job": "wc", "streamjob.io/driver-epoch": "3"}, "managedFields": [{"manager": "kubelet"}]},
        "spec": {"nodeName": "node-1", "containers": [{"name": "driver", "args": ["run", "--conf", "spark.x=y"] * 20}]},
        "status": {"phase": "Failed", "podIP": "10.0.0.7",
                   "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}],
                   "containerStatuses": [{"name": "driver", "state": {"terminated": terminated}}]},
    }
    kept = slim_pod(full)
    assert set(kept) == {"apiVersion", "kind", "metadata", "spec", "status"} and "managedFields" not in kept["metadata"]
    assert kept["spec"] == {"nodeName": "node-1"}
    assert driver_pod(kept) == driver_pod(full)
    assert driver_pod(kept).evicted_from_lost_node and driver_pod(kept).epoch == 3 and driver_pod(kept).node == "node-1"
