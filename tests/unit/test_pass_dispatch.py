"""The pass queue (dispatch.PassPool): urgent passes first, one waiting pass per job, results to every trigger.

At 1,000 jobs a killed driver's pass waited 14-44 s behind timer ticks in kopf's FIFO pool
(docs/benchmarks/operator-scale.md). Here the one worker is held by another job's pass while
the test queues more, so the order the queue picks is observable.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from streamjob_operator.dispatch import ROUTINE, URGENT, PassPool
from streamjob_operator.passes import Passes
from streamjob_operator.progress import Progress


class Recorder:
    """The pass function: records each job's pass; the job "hold" waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.runs: list[str] = []
        self.fail: set[str] = set()

    def __call__(self, key: str) -> str:
        if key == "hold":
            self.started.set()
            self.release.wait(10)
        self.runs.append(key)
        if key in self.fail:
            raise RuntimeError(f"pass of {key} failed")
        return f"decision of {key}"


@pytest.fixture
def held() -> Iterator[tuple[PassPool, Recorder]]:
    """A one-worker pool whose worker runs the "hold" pass until the test releases it."""
    rec = Recorder()
    pool = PassPool(1, rec)
    pool.submit("hold", URGENT)
    assert rec.started.wait(5)
    yield pool, rec
    rec.release.set()


def results(*futures: Any) -> list[Any]:
    return [f.result(timeout=5) for f in futures]


def test_an_urgent_pass_goes_ahead_of_timer_passes_queued_before_it(held: tuple[PassPool, Recorder]) -> None:
    pool, rec = held
    routine = [pool.submit(f"timer-{i}", ROUTINE) for i in range(3)]
    urgent = pool.submit("killed-driver", URGENT)
    assert pool.depth() == {URGENT: 1, ROUTINE: 3}
    rec.release.set()
    results(*routine, urgent)
    assert rec.runs == ["hold", "killed-driver", "timer-0", "timer-1", "timer-2"]
    assert pool.depth() == {URGENT: 0, ROUTINE: 0}


def test_triggers_for_a_waiting_job_join_its_pass(held: tuple[PassPool, Recorder]) -> None:
    pool, rec = held
    first, second, third = (pool.submit("wc", ROUTINE) for _ in range(3))
    assert first is second is third and pool.depth()[ROUTINE] == 1
    rec.release.set()
    assert results(first, second, third) == ["decision of wc"] * 3
    assert rec.runs == ["hold", "wc"]  # one pass for the three triggers


def test_an_event_for_a_job_waiting_on_the_timer_raises_its_pass_to_urgent(held: tuple[PassPool, Recorder]) -> None:
    pool, rec = held
    timer_a, timer_b = pool.submit("a", ROUTINE), pool.submit("b", ROUTINE)
    event_b = pool.submit("b", URGENT)
    assert event_b is timer_b and pool.depth() == {URGENT: 1, ROUTINE: 1}
    rec.release.set()
    results(timer_a, event_b)
    assert rec.runs == ["hold", "b", "a"]  # b once, first


def test_a_trigger_during_a_running_pass_queues_the_next_one(held: tuple[PassPool, Recorder]) -> None:
    pool, rec = held
    during = pool.submit("hold", URGENT)  # "hold" is running: what this trigger brought needs a pass after it
    assert pool.depth()[URGENT] == 1  # waiting: the running pass is not joined
    rec.release.set()
    results(during)
    assert rec.runs == ["hold", "hold"]


def test_a_failed_pass_reaches_every_trigger_it_served(held: tuple[PassPool, Recorder]) -> None:
    pool, rec = held
    rec.fail.add("wc")
    futures = [pool.submit("wc", ROUTINE), pool.submit("wc", URGENT)]
    rec.release.set()
    for future in futures:
        with pytest.raises(RuntimeError, match="pass of wc failed"):
            future.result(timeout=5)
    assert results(pool.submit("next", ROUTINE)) == ["decision of next"]  # the worker survived it


def test_passes_of_different_jobs_run_on_all_workers_at_once() -> None:
    barrier = threading.Barrier(3, timeout=5)
    pool = PassPool(3, lambda key: barrier.wait())
    results(*(pool.submit(k, ROUTINE) for k in ("a", "b", "c")))  # a BrokenBarrierError unless all three ran at once


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        PassPool(0, lambda key: None)


def test_the_timer_asks_a_pass_only_for_known_jobs_that_are_due() -> None:
    """One thread for every job (passes.Passes.tick), instead of a kopf timer per job: a job not due costs no worker."""
    progress, ran = Progress(), []
    timer = Passes(ran.append, progress.known, lambda: 1)
    timer.rest(("ns", "steady"), float("inf"))
    timer.rest(("ns", "was-steady"), 0.0)  # its rest is over
    for name in ("new", "steady", "was-steady", "gone"):
        progress.saw(("ns", name))
    progress.saw(("ns", "gone"), deleted=True)
    assert timer.tick() == 2
    timer.submit(("ns", "after"), ROUTINE).result(timeout=5)  # the one worker runs routine passes in order
    assert sorted(ran) == [("ns", "after"), ("ns", "new"), ("ns", "was-steady")]


def test_a_failed_pass_pauses_the_timer_for_that_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamjob_operator import handlers

    def fails(namespace: str, name: str) -> None:
        raise handlers.PassFailed("status write refused")

    monkeypatch.setattr(handlers, "reconcile", fails)
    monkeypatch.setattr(handlers, "PASSES", Passes(lambda key: None, lambda: [], lambda: 1))
    with pytest.raises(handlers.PassFailed):
        handlers.measured("ns", "broken")
    assert not handlers.PASSES.due(("ns", "broken"))  # the next timer pass waits FAILED_PASS_RETRY_SECONDS; events do not
    assert handlers.PASSES.due(("ns", "other"))


def test_a_pass_on_a_worker_counts_in_reconcile_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """/metrics' streamjob_reconcile_in_flight is the passes running on the workers (at --workers: the pool is full)."""
    from streamjob_operator import handlers, metrics

    started, release = threading.Event(), threading.Event()

    def holds(namespace: str, name: str) -> None:
        started.set()
        release.wait(10)

    def in_flight() -> float | None:
        return metrics.REGISTRY.get_sample_value("streamjob_reconcile_in_flight")

    monkeypatch.setattr(handlers, "reconcile", holds)
    timer = Passes(lambda key: handlers.measured(*key), lambda: [], lambda: 1)
    before = in_flight()
    future = timer.submit(("ns", "wc"), URGENT)
    assert started.wait(5)
    assert in_flight() == before + 1
    release.set()
    future.result(timeout=5)
    assert in_flight() == before
