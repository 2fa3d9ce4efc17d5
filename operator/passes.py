"""When passes run: the operator's one pass queue, the timer thread that asks it for routine passes, and each job's rest.

Built once by ``streamjob_operator.handlers`` (``PASSES``), which gives it the pass to run and the
jobs the timer looks at; the kopf handlers ``submit`` the passes events ask for, and each pass says
how long its job may go without a timer pass (``rest``, ``wake``: the idle gate, ``handlers._gate``).
``streamjob_operator.main`` reads the queue for /metrics (``waiting``). The queue itself is
``dispatch.PassPool``; no Kubernetes or S3 I/O here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from streamjob_operator.dispatch import ROUTINE, URGENT, PassPool

log = logging.getLogger("streamjob_operator")

Key = tuple[str, str]
TIMER_SECONDS = 2.0


class Passes:
    """Every pass of every job is asked for here: by an event (``submit``) or by the timer (``tick``, for the jobs
    that are ``due``). ``run(key)`` runs on the pool's ``workers()`` threads; ``jobs()`` lists what the timer visits."""

    def __init__(self, run: Callable[[Key], Any], jobs: Callable[[], Iterable[Key]], workers: Callable[[], int]) -> None:
        self._run = run
        self._jobs = jobs
        self._workers = workers
        self._guard = threading.Lock()
        self._pool: PassPool | None = None
        # monotonic time before which the timer makes no pass for a job: no request at all for it. Any other
        # trigger (a spec change, a driver pod event, deletion) runs a pass at once, and that pass sets it again.
        self._until: dict[Key, float] = {}
        self._stop: threading.Event | None = None

    # --- the queue ---------------------------------------------------------------------------
    def submit(self, key: Key, priority: int) -> Future[Any]:
        """The future of the job's next pass (``PassPool.submit``). The workers start with the first pass asked for,
        from the event loop or the timer thread, once main has set how many there are."""
        with self._guard:
            if self._pool is None:
                self._pool = PassPool(self._workers(), self._run)
            pool = self._pool
        return pool.submit(key, priority)

    def waiting(self, priority: str) -> int:
        """Passes waiting for a worker, ``urgent`` or ``routine`` (for /metrics)."""
        pool = self._pool
        return 0 if pool is None else pool.depth()[URGENT if priority == "urgent" else ROUTINE]

    # --- the timer ---------------------------------------------------------------------------
    def rest(self, key: Key, seconds: float) -> None:
        """The timer makes no pass for the job for ``seconds``; events still do."""
        self._until[key] = time.monotonic() + seconds

    def wake(self, key: Key) -> None:
        """The job is due at the timer's next tick (and nothing is kept for it here: also what a deleted job leaves)."""
        self._until.pop(key, None)

    def due(self, key: Key) -> bool:
        """False while the job's rest runs (the timer then makes no pass for it)."""
        until = self._until.get(key)
        return until is None or time.monotonic() >= until

    def tick(self) -> int:
        """One timer tick: a routine pass for every job of ``jobs()`` that is ``due``; returns how many were asked for.

        One thread runs it every ``TIMER_SECONDS`` for all jobs. It replaced a kopf timer per job,
        whose invocations (500 a second at 1,000 jobs, nearly all finding the job not due) were the
        largest part of the operator's idle CPU (a py-spy profile of the 1,000-job benchmark)."""
        asked = 0
        for key in self._jobs():
            if self.due(key):
                self.submit(key, ROUTINE)
                asked += 1
        return asked

    def start_timer(self, interval: float) -> None:
        """Starts the timer thread: a ``tick`` every ``interval`` seconds until ``stop_timer``."""
        stop = self._stop = threading.Event()
        threading.Thread(target=self._tick_forever, args=(stop, interval), name="streamjob-timer", daemon=True).start()

    def stop_timer(self) -> None:
        """No timer pass is asked for from here on (passes already queued still run)."""
        if self._stop is not None:
            self._stop.set()

    def _tick_forever(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            try:
                self.tick()
            except Exception:  # a tick that failed is logged; the next one comes
                log.exception("Timer tick failed")
