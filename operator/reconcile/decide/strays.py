"""Drivers that should not be there: strays (not the recorded driver) and pods stuck Terminating.

Pure. Called by ``steady`` (a job without an operation), ``rollout`` (the
Deploying phase) and ``stopping`` (the Stopping phase).
"""

from __future__ import annotations

from datetime import timedelta

from ..model import DeleteDriver, DriverPod
from .context import STUCK_TERMINATING_SECONDS, Pass


def delete_strays(p: Pass) -> bool:
    """Drivers that are not the recorded one are deleted first: never two drivers for a job."""
    strays = [pod for pod in p.obs.drivers if pod.name != p.st.driver_pod]
    for pod in strays:
        if not pod.deleting:
            p.actions.append(DeleteDriver(pod.name))
            p.emit("Warning", "StrayDriverDeleted", f"Deleted driver pod {pod.name}: the current driver is {p.st.driver_pod}")
    if strays:
        p.again(1)
    return bool(strays)


def force_stuck(p: Pass, pods: list[DriverPod]) -> set[str]:
    """Pods on a lost node, deleted with grace 0 with an event: evicted by the node controller (the kubelet that
    would end them is gone), or still Terminating well past their grace period. A driver still alive there is
    fenced by the checkpoint's epoch once its replacement starts."""
    stuck = [pod for pod in pods if pod.deleting and (
        (pod.evicted_from_lost_node and p.spec.restart_policy.driver_unreachable_seconds > 0)
        or (pod.deletion_deadline is not None
            and p.now >= pod.deletion_deadline + timedelta(seconds=STUCK_TERMINATING_SECONDS)))]
    for pod in stuck:
        p.actions.append(DeleteDriver(pod.name, grace_seconds=0))
        why = ("was evicted from its node by the node controller (the node is not ready or unreachable)"
               if pod.evicted_from_lost_node else
               f"was still terminating {STUCK_TERMINATING_SECONDS}s after its grace period (its node is probably lost)")
        p.emit("Warning", "DriverForceDeleted", f"Driver pod {pod.name} {why}: deleted it with grace 0")
    return {pod.name for pod in stuck}
