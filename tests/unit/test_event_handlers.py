"""The kopf event handlers feed the read cache in the event loop, not in a worker.

A synchronous handler waits for a free worker like every pass: with a backlog of passes (1,000
StreamJobs created at once, docs/benchmarks/operator-scale.md) a driver pod's Running event reached
the cache minutes late, passes read the pod as Pending, and the readiness deadline restarted drivers
that were running. Here every worker is taken while the event arrives: the cache has it at once, and
the job's pass runs when a worker frees up.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from streamjob_operator import handlers
from streamjob_operator.dispatch import URGENT
from streamjob_operator.k8s.cache import ReadCache
from streamjob_operator.passes import Passes
from streamjob_operator.progress import Progress
from streamjob_operator.reconcile import names


def pod(phase: str, version: str) -> dict[str, Any]:
    labels = {names.LABEL_ROLE: names.ROLE_DRIVER, names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_JOB: "wc"}
    return {"metadata": {"name": "wc-driver-1", "namespace": "ns", "labels": labels, "resourceVersion": version},
            "status": {"phase": phase}}


@pytest.fixture
def busy_workers(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The operator's only worker, taken by another job's pass until the test releases it; the passes run, recorded."""
    release = threading.Event()
    passes: list[tuple[str, str]] = []

    def measured(namespace: str, job: str) -> None:
        if job == "other":
            release.wait(10)
        else:
            passes.append((namespace, job))

    cache = ReadCache(True)
    monkeypatch.setitem(handlers._state, "clients", SimpleNamespace(cache=cache))
    monkeypatch.setattr(handlers, "measured", measured)
    monkeypatch.setattr(handlers, "PASSES", Passes(lambda key: handlers.measured(*key), lambda: [], lambda: 1))
    handlers.PASSES.submit(("ns", "other"), URGENT)
    yield cache, release, passes
    release.set()


def test_a_driver_pod_event_reaches_the_cache_while_every_worker_is_busy(busy_workers: Any) -> None:
    cache, release, passes = busy_workers
    cache.listed("ns", "wc", [pod("Pending", "10")], "10")  # the pass that created it listed it Pending

    async def scenario() -> list[dict[str, Any]] | None:
        running = pod("Running", "11")
        handler = asyncio.ensure_future(handlers.on_driver_pod(
            namespace="ns", labels=running["metadata"]["labels"], type="MODIFIED", body=running))
        await asyncio.sleep(0.2)
        seen = cache.pods("ns", "wc")
        assert not handler.done() and passes == []  # the pass waits for a worker; the cache did not
        release.set()
        await handler
        return seen

    seen = asyncio.run(scenario())
    assert seen is not None and [p["status"]["phase"] for p in seen] == ["Running"]
    assert passes == [("ns", "wc")]


def test_a_streamjob_event_reaches_the_cache_while_every_worker_is_busy(busy_workers: Any) -> None:
    cache, _, _ = busy_workers
    body = {"metadata": {"name": "wc", "namespace": "ns", "resourceVersion": "12"}, "spec": {}}

    async def scenario() -> None:
        await asyncio.wait_for(handlers.on_streamjob_event(type="MODIFIED", body=body), 1)

    asyncio.run(scenario())
    assert cache.job("ns", "wc") == body


def test_a_deleted_job_gets_a_last_pass_that_drops_what_the_operator_kept(busy_workers: Any) -> None:
    """The pass finds the job gone (its GET answers 404) and forgets it: cache, slots, budgets, metrics, gates."""
    cache, release, passes = busy_workers
    body = {"metadata": {"name": "wc", "namespace": "ns", "resourceVersion": "12"}, "spec": {}}

    async def scenario() -> None:
        await handlers.on_streamjob_event(type="MODIFIED", body=body)
        await handlers.on_streamjob_event(type="DELETED", body={**body, "metadata": {**body["metadata"], "resourceVersion": "13"}})

    asyncio.run(scenario())
    assert cache.job("ns", "wc") is None
    release.set()
    handlers.PASSES.submit(("ns", "after"), URGENT).result(timeout=5)  # the one worker runs in order
    assert passes == [("ns", "wc"), ("ns", "after")]  # one pass for the deletion, none for the MODIFIED event


def test_a_job_the_cache_cannot_keep_is_still_on_the_timers_list(busy_workers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resourceVersion that is not an integer: the cache answers nothing for the job (its passes make the request),
    and the timer still visits it, from the list progress keeps (why that list is not the cache's)."""
    cache, _, _ = busy_workers
    monkeypatch.setattr(handlers.SETTINGS, "progress", Progress())
    body = {"metadata": {"name": "opaque", "namespace": "ns", "resourceVersion": "v7"}, "spec": {}}
    asyncio.run(handlers.on_streamjob_event(type="ADDED", body=body))
    assert cache.job("ns", "opaque") is None
    assert handlers.SETTINGS.progress.known() == [("ns", "opaque")]
