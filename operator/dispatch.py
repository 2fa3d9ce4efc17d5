"""Where reconcile passes wait for a worker: one queue, urgent passes first, one queued pass per job.

kopf runs synchronous handlers on one thread pool in the order they arrive. At 1,000
StreamJobs that order cost the operator its reactions: a timer tick for every job every
2 s (even one that only found the job not due), spec changes and driver pod events
all waited in the same FIFO queue, and a killed driver's pass came 14-44 s after its pod
failed (docs/benchmarks/operator-scale.md). Here:

- the timer is one thread for all jobs (``passes.Passes.tick``) that asks for a pass only for the
  jobs that are due, so only passes with work reach the queue;
- a pass triggered by an event (a driver pod changed, the spec changed, a deletion, the
  operator's start) is ``URGENT`` and goes ahead of every ``ROUTINE`` timer pass;
- a job has at most one pass waiting: another trigger while it waits joins that pass
  (raising it to urgent if need be) and gets its result. Passes are level-based (each reads
  the job and its pods when it starts), so one pass after several events sees them all.

A pass that has started is not joined: a trigger during it queues the next one, so what
the event brought is read by a pass that starts after it. Used by
``streamjob_operator.passes``; no Kubernetes or S3 I/O here.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

URGENT = 0  # a pass an event asked for: a driver pod, a spec change, a deletion, the operator's start
ROUTINE = 1  # a timer pass: a poll due, a restart delay over, an idle interval over


@dataclass
class _Entry:
    key: Hashable
    priority: int
    future: Future[Any] = field(default_factory=Future)
    started: bool = False


class PassPool:
    """``workers`` daemon threads running ``run(key)`` for queued jobs, most urgent first, then in arrival order.

    Every pass runs the same function, so a trigger that joins a waiting pass gets what it would have run."""

    def __init__(self, workers: int, run: Callable[[Any], Any], name: str = "streamjob-pass") -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._run = run
        self._heap: list[tuple[int, int, _Entry]] = []
        self._waiting: dict[Hashable, _Entry] = {}  # job -> its pass not yet started
        self._order = itertools.count()
        self._cond = threading.Condition()
        for i in range(workers):
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True).start()

    def submit(self, key: Hashable, priority: int) -> Future[Any]:
        """The future of ``key``'s next pass: the one already waiting (raised to ``priority`` when more urgent),
        or a new one."""
        with self._cond:
            entry = self._waiting.get(key)
            if entry is None:
                entry = self._waiting[key] = _Entry(key, priority)
                heapq.heappush(self._heap, (priority, next(self._order), entry))
                self._cond.notify()
            elif priority < entry.priority:  # the old heap item stays behind, stale: popped and skipped
                entry.priority = priority
                heapq.heappush(self._heap, (priority, next(self._order), entry))
                self._cond.notify()
            return entry.future

    def depth(self) -> dict[int, int]:
        """Passes waiting, by priority."""
        with self._cond:
            counts = {URGENT: 0, ROUTINE: 0}
            for entry in self._waiting.values():
                counts[entry.priority] = counts.get(entry.priority, 0) + 1
            return counts

    def _take(self) -> _Entry:
        with self._cond:
            while True:
                while not self._heap:
                    self._cond.wait()
                priority, _, entry = heapq.heappop(self._heap)
                if entry.started or priority != entry.priority:
                    continue  # already run, or re-queued at a higher priority
                entry.started = True
                del self._waiting[entry.key]
                return entry

    def _work(self) -> None:
        while True:
            entry = self._take()
            if entry.future.set_running_or_notify_cancel():
                try:
                    result = self._run(entry.key)
                except BaseException as err:  # noqa: BLE001 - handed to whoever awaits the pass
                    entry.future.set_exception(err)
                else:
                    entry.future.set_result(result)
