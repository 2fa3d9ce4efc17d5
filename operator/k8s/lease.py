"""Leader election with a coordination.k8s.io Lease: one active operator replica at a time.

Called by ``streamjob_operator.main`` before kopf starts. ``acquire`` blocks
until this replica holds the Lease; a daemon thread renews it, and if
renewing fails for longer than the lease duration the process exits (crash
and let Kubernetes restart it), so two replicas never act on the same job.
Optimistic concurrency (resourceVersion) decides races between candidates.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _fmt(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class LeaderLease:
    def __init__(self, api: client.ApiClient, namespace: str, name: str, identity: str,
                 lease_seconds: int = 15, renew_seconds: float = 5.0) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self._stop = threading.Event()

    def _body(self, resource_version: str | None, transitions: int, acquired: datetime | None) -> dict[str, Any]:
        now = _now()
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": _fmt(acquired or now),
                "renewTime": _fmt(now),
                "leaseTransitions": transitions,
            },
        }

    def try_acquire(self) -> bool:
        """One attempt: True when this replica holds (or renewed) the Lease."""
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            try:
                self.coordination.create_namespaced_lease(self.namespace, self._body(None, 0, None))
                return True
            except ApiException as err2:
                if err2.status == 409:
                    return False
                raise
        spec = lease.spec
        holder = spec.holder_identity
        renewed = spec.renew_time
        duration = spec.lease_duration_seconds or self.lease_seconds
        expired = renewed is None or _now() > renewed + timedelta(seconds=duration)
        if holder != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) + (0 if holder == self.identity else 1)
        acquired = spec.acquire_time if holder == self.identity else None
        try:
            self.coordination.replace_namespaced_lease(
                self.name, self.namespace, self._body(lease.metadata.resource_version, transitions, acquired)
            )
            return True
        except ApiException as err:
            if err.status == 409:  # someone else won the race
                return False
            raise

    def acquire(self) -> None:
        announced = False
        while not self._stop.is_set():
            try:
                if self.try_acquire():
                    log.info("Acquired leader lease lease=%s/%s identity=%s", self.namespace, self.name, self.identity)
                    return
            except ApiException as err:
                log.warning("Failed to read leader lease lease=%s/%s status=%s", self.namespace, self.name, err.status)
            if not announced:
                log.info("Waiting for leader lease lease=%s/%s identity=%s", self.namespace, self.name, self.identity)
                announced = True
            time.sleep(self.renew_seconds / 2)

    def keep_renewing(self) -> threading.Thread:
        def loop() -> None:
            last_ok = time.monotonic()
            while not self._stop.wait(self.renew_seconds):
                try:
                    if self.try_acquire():
                        last_ok = time.monotonic()
                        continue
                    log.error("Lost leader lease lease=%s/%s identity=%s; exiting", self.namespace, self.name, self.identity)
                    os._exit(1)
                except Exception as err:
                    log.warning("Failed to renew leader lease lease=%s/%s error=%s", self.namespace, self.name, err)
                if time.monotonic() - last_ok > self.lease_seconds:
                    log.error("Could not renew leader lease for %ss lease=%s/%s; exiting", self.lease_seconds, self.namespace, self.name)
                    os._exit(1)

        thread = threading.Thread(target=loop, name="leader-lease", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        self._stop.set()
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
                log.info("Released leader lease lease=%s/%s identity=%s", self.namespace, self.name, self.identity)
        except ApiException as err:
            log.warning("Failed to release leader lease lease=%s/%s status=%s", self.namespace, self.name, err.status)
