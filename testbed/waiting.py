"""Bounded waits on the state of the world, for tests on the test bed.

Called by ``tests/conftest.py`` and tests. Every wait has a timeout and says
what it waited for, with the last observed value, when it gives up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes import client
from kubernetes.client.rest import ApiException

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25) -> T:
    """Calls ``probe`` until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except ApiException as exc:
            last = f"ApiException {exc.status}: {exc.reason}"
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def wait_pod_phase(core: client.CoreV1Api, namespace: str, name: str, phases: set[str], timeout: float = 60) -> client.V1Pod:
    def probe() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in phases else None

    return wait_for(probe, timeout, f"pod {namespace}/{name} to reach phase {sorted(phases)}")


def wait_gone(read: Callable[[], object], timeout: float, what: str) -> None:
    def probe() -> bool:
        try:
            read()
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_for(probe, timeout, f"{what} to be gone")
