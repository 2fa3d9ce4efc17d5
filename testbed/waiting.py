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


def crds_established(kubectl: str, kubeconfig: str, names: list[str] | None = None) -> bool:
    """True when every CRD named (all when None) is Established, read with ``kubectl get -o json``.

    Not ``kubectl wait --for=condition=Established``: right after an apply, before the API
    server has written any condition, it fails at once with ".status.conditions accessor
    error: <nil>" instead of waiting (seen on a fresh clone).
    """
    import json
    import subprocess

    args = [kubectl, f"--kubeconfig={kubeconfig}", "get", "crd", *(names or []), "-o", "json"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        return False
    found = json.loads(done.stdout)
    items = found.get("items", [found]) if found.get("kind") == "List" else [found]
    return all(
        any(c.get("type") == "Established" and c.get("status") == "True" for c in (item.get("status") or {}).get("conditions") or [])
        for item in items
    )


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
