"""The Stopping phase every operation passes through: delete the drivers, then the operation's next step.

Pure. Called by ``flow`` with the operation's ``Steps``; what comes after the
drivers are gone (deploy, wait, suspended, finalizer removed) is the
operation module's ``after_stopping``.
"""

from __future__ import annotations

from datetime import timedelta

from ..model import DeleteDriver
from ..policy import parse_time
from .context import FORCE_DELETE_GRACE_SECONDS, Pass, Steps
from .strays import force_stuck


def stopping(p: Pass, steps: Steps) -> None:
    op = p.op()
    pods = tuple(pod for pod in p.obs.drivers if pod.name != op.standby_pod)  # a warm standby waits to take over
    if not pods:
        steps.after_stopping(p)
        return
    deadline = parse_time(op.deadline)
    force = steps.force_at_deadline and deadline is not None and p.now >= deadline
    if force and deadline is not None and p.now >= deadline + timedelta(seconds=FORCE_DELETE_GRACE_SECONDS):
        p.emit("Warning", "DeletionForced", f"Driver pods {[pod.name for pod in pods]} still present after the deadline; "
               "finishing deletion, garbage collection removes them")
        steps.after_stopping(p)
        return
    forced = set() if force else force_stuck(p, list(pods))
    for pod in pods:
        if (not pod.deleting or force) and pod.name not in forced:
            p.actions.append(DeleteDriver(pod.name, grace_seconds=0 if force else None))
    p.again(1)
