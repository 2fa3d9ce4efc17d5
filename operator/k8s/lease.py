"""Leader election with a coordination.k8s.io Lease: one replica acts, the others stand by.

Called by ``streamjob_operator.main``: ``start`` runs the election in two
daemon threads while the process already serves its health endpoints,
``wait_until_leading`` blocks main until this replica leads (then kopf
starts), and the actor calls ``ensure_leading`` before every write it makes.
The rules (``lease_rules``) are client-go's: a standby times the holder on
its own monotonic clock from when it saw the record change, and a leader acts
only until ``renew_deadline`` after it sent its last accepted renewal, which
is ``lease_seconds - renew_deadline`` before anyone may take over. Every call
to the API server gives up after ``Timings.call_timeout``.

Stepping down is exiting the process (client-go's convention, and the pod
restarts as a standby): a watchdog thread exits at the deadline, without
waiting for a hung renewal to return, and ``ensure_leading`` exits the same
way if a handler thread gets there first (a process frozen past its deadline
and thawed). So no handler of a replica that may have been replaced sends
another write.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from streamjob_operator.k8s.lease_rules import Record, Seen, Timings, leading_until, may_take, observe

log = logging.getLogger(__name__)


class NotLeading(Exception):
    """This replica does not hold the Lease (standing by, released, or past its deadline): it must not write."""


def exit_process(why: str) -> None:
    """The default step-down: exit at once, with no cleanup that could still act (client-go's callers do the same)."""
    os._exit(1)


def _micro_time() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: client.ApiClient, namespace: str, name: str, identity: str, timings: Timings, *,
                 clock: Callable[[], float] = time.monotonic, on_lost: Callable[[str], None] = exit_process) -> None:
        config = copy.deepcopy(api.configuration)
        config.retries = False  # urllib3 would retry a failed call 3 times, each with the whole call timeout
        self.coordination = client.CoordinationV1Api(client.ApiClient(config))
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings
        self.clock = clock
        self.on_lost = on_lost
        self._lock = threading.Lock()
        self._seen: Seen | None = None
        self._until: float | None = None  # leading until (local monotonic), None when not leading
        self._released = False
        self._lost = False
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._ticked = clock()  # the election loop's last round
        self._read_ok: float | None = None  # the last time the Lease could be read
        self._failing = False
        self._transitions = 0
        self._acquired: str | None = None

    # --- the state, read by the fence, the watchdog and the health endpoints --------------------------
    def leading(self) -> bool:
        with self._lock:
            return self._until is not None and not (self._released or self._lost) and self.clock() < self._until

    def ensure_leading(self) -> None:
        """The fence before every write: raises NotLeading, and steps down first if the deadline has passed."""
        with self._lock:
            until, stopped = self._until, self._released or self._lost
        if stopped or until is None:
            raise NotLeading(f"replica {self.identity} does not hold lease {self.namespace}/{self.name}")
        if self.clock() >= until:
            self._step_down("the renew deadline passed before this write")
            raise NotLeading(f"replica {self.identity} passed its renew deadline")

    def alive(self) -> bool:
        """The election loop goes round (each round is bounded by the call timeouts)."""
        return self.clock() - self._ticked < self.timings.lease_seconds + 2 * self.timings.call_timeout

    def connected(self) -> bool:
        """The Lease could be read within the last lease duration: this replica could take over."""
        read = self._read_ok
        return read is not None and self.clock() - read < self.timings.lease_seconds

    def _renewed(self, sent: float) -> None:
        with self._lock:
            if self._released or self._lost:
                return
            late = self._until is not None and sent >= self._until
            if not late:
                self._until = leading_until(sent, self.timings)
        if late:  # a leader thawed past its deadline renews in time only in luck: it stops as client-go does
            self._step_down("the renew deadline passed before this renewal was sent")
            return
        self._leading.set()

    def _step_down(self, why: str) -> None:
        with self._lock:
            if self._lost or self._released:
                return
            self._lost = True  # _until stays: when this replica stopped acting
        self._stop.set()  # no more rounds: a replica that stepped down never writes the Lease again
        log.error("Stepped down from leader lease lease=%s/%s identity=%s why=%s; exiting so the pod restarts as a standby",
                  self.namespace, self.name, self.identity, why)
        self.on_lost(why)

    # --- the API server ---------------------------------------------------------------------------------
    def _read(self) -> tuple[Record, Any] | None:
        """The Lease as a record, and the object itself (for the fields only humans read); None when there is none."""
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timings.call_timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return Record(lease.metadata.resource_version, lease.spec.holder_identity, lease.spec.lease_duration_seconds), lease

    def _body(self, holder: str, lease_seconds: int, transitions: int, acquired: str | None) -> dict[str, Any]:
        now = _micro_time()
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self._seen is not None:
            meta["resourceVersion"] = self._seen.record.version  # the write fails (409) if anyone wrote since we read
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": lease_seconds, "acquireTime": acquired or now,
                         "renewTime": now, "leaseTransitions": transitions}}

    def _write(self, body: dict[str, Any]) -> Record | None:
        """Creates the Lease, or replaces the version last seen; None when another replica wrote first."""
        try:
            if self._seen is None:
                made = self.coordination.create_namespaced_lease(self.namespace, body, _request_timeout=self.timings.call_timeout)
            else:
                made = self.coordination.replace_namespaced_lease(self.name, self.namespace, body,
                                                                  _request_timeout=self.timings.call_timeout)
        except ApiException as err:
            if err.status == 409:
                return None
            raise
        return Record(made.metadata.resource_version, made.spec.holder_identity, made.spec.lease_duration_seconds)

    def attempt(self) -> bool:
        """One round: read the Lease, and take or renew it when the rules allow. True when this replica leads."""
        read = self._read()
        now = self.clock()
        self._read_ok = now
        previous = self._seen
        self._seen = None if read is None else observe(previous, read[0], now)
        self._transitions, self._acquired = 0, None
        if read is not None:
            lease = read[1]
            ours = lease.spec.holder_identity == self.identity
            self._transitions = (lease.spec.lease_transitions or 0) + (0 if ours or not lease.spec.holder_identity else 1)
            self._acquired = lease.spec.acquire_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if ours and lease.spec.acquire_time else None
        seen = self._seen
        if seen is not None and (previous is None or seen.record.holder != previous.record.holder):
            log.info("Observed leader lease holder lease=%s/%s holder=%s", self.namespace, self.name, seen.record.holder or "none")
        if seen is not None and self._until is not None and seen.record.holder != self.identity:
            self._step_down(f"the lease now names {seen.record.holder or 'no holder'}")
            return False
        if seen is not None and not may_take(seen, self.identity, now, self.timings.lease_seconds):
            return False
        body = self._body(self.identity, math.ceil(self.timings.lease_seconds), self._transitions, self._acquired)
        sent = self.clock()
        written = self._write(body)
        if written is None:
            return False
        self._seen = Seen(written, sent)
        if self._until is None:
            log.info("Acquired leader lease lease=%s/%s identity=%s transitions=%d",
                     self.namespace, self.name, self.identity, self._transitions)
        self._renewed(sent)
        return True

    # --- the threads ---------------------------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._elect, name="leader-election", daemon=True).start()
        threading.Thread(target=self._watch_deadline, name="leader-deadline", daemon=True).start()

    def wait_until_leading(self) -> bool:
        """Blocks until this replica leads (True) or the election stopped (False)."""
        while not self._stop.is_set():
            if self._leading.wait(0.5):
                return True
        return False

    def _elect(self) -> None:
        announced = False
        while not self._stop.is_set():
            self._ticked = self.clock()
            try:
                leading = self.attempt()
                if self._failing:
                    log.info("Reached the API server again lease=%s/%s identity=%s", self.namespace, self.name, self.identity)
                    self._failing = False
            except Exception as err:  # a timeout, a refused connection, a 5xx: the next round tries again
                leading = self._until is not None
                if not self._failing:
                    log.warning("Failed to read or write leader lease lease=%s/%s identity=%s error=%s",
                                self.namespace, self.name, self.identity, describe(err))
                    self._failing = True
            if not leading and not announced and self._seen is not None:
                log.info("Waiting for leader lease lease=%s/%s identity=%s holder=%s", self.namespace, self.name,
                         self.identity, self._seen.record.holder or "none")
                announced = True
            self._stop.wait(self.timings.retry_period)

    def _watch_deadline(self) -> None:
        """Steps down when the deadline passes, whatever the election thread is blocked in."""
        while not self._stop.is_set():
            with self._lock:
                until, done = self._until, self._lost or self._released
            if done:
                return
            if until is None:
                self._leading.wait(0.5)
                continue
            left = until - self.clock()
            if left <= 0:
                self._step_down(f"no renewal was accepted within --renew-deadline-seconds={self.timings.renew_deadline:g}")
                return
            self._stop.wait(left)

    def release(self, idle: Callable[[], bool] = lambda: True) -> None:
        """Hands the Lease over at shutdown (holder cleared): a standby takes it at its next round, not after expiry.

        From the first line on, ``ensure_leading`` refuses every write; ``idle`` waits for the passes that were
        running to end. If they do not, the Lease is left to expire: no standby may start while one could still act.
        """
        with self._lock:
            was_leading = self._until is not None and not self._lost and self.clock() < self._until
            self._released = True
            self._until = None
        self._stop.set()
        if not was_leading or self._seen is None:
            return
        if not idle():
            log.warning("Left leader lease to expire lease=%s/%s identity=%s why=passes still running",
                        self.namespace, self.name, self.identity)
            return
        body = self._body("", 1, self._transitions, None)
        try:
            if self._write(body) is not None:
                log.info("Released leader lease lease=%s/%s identity=%s", self.namespace, self.name, self.identity)
        except Exception as err:
            log.warning("Failed to release leader lease lease=%s/%s identity=%s error=%s", self.namespace, self.name,
                        self.identity, describe(err))


def describe(err: Exception) -> str:
    if isinstance(err, ApiException):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}"
