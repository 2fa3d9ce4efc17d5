"""The lifecycle vocabulary of a StreamJob: ``status.state``, the printer column STATE.

One enum for everyone who reads or writes that field: the operator decides it
(``streamjob_operator.reconcile.decide``) and types its status with it
(``streamjob_operator.api.status``), the kubectl plugin waits on it
(``streamjob_cli.waits``), tests compare against it. Like the Flink operator's
``ResourceLifecycleState``, each state carries what it means and whether it is
terminal: a terminal state is settled, the operator does nothing more until the
spec or the world changes; the others are on the way to one.
"""

from __future__ import annotations

from enum import StrEnum


class LifecycleState(StrEnum):
    """Where the job is in its life; the printer column STATE. A StrEnum: it compares equal to its
    string on the wire (``status.state == "Running"``) and formats as it."""

    deploying = "Deploying"
    running = "Running"
    upgrading = "Upgrading"
    restarting = "Restarting"
    rolling_back = "RollingBack"
    suspending = "Suspending"
    suspended = "Suspended"
    failed = "Failed"
    finished = "Finished"
    deleting = "Deleting"

    @property
    def description(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def terminal(self) -> bool:
        """Settled: nothing more happens until the spec (or a nonce) changes or the driver does."""
        return self in _TERMINAL


_DESCRIPTIONS = {
    LifecycleState.deploying: "A driver of the job is being created and started (first deploy, resume).",
    LifecycleState.running: "The driver runs the last reconciled spec.",
    LifecycleState.upgrading: "A changed spec is being rolled out (savepoint, stop, deploy, first batch).",
    LifecycleState.restarting: "The driver is being restarted from the latest checkpoint (a failure or restartNonce).",
    LifecycleState.rolling_back: "An upgrade did not become ready: the last stable spec is being deployed again.",
    LifecycleState.suspending: "The job is being stopped, with a savepoint when one is configured.",
    LifecycleState.suspended: "No driver runs; spec.state running resumes the job.",
    LifecycleState.failed: "The driver failed and the restart policy is used up, or the failure is permanent; "
    "a spec change or restartNonce starts it again.",
    LifecycleState.finished: "The query ended by itself; a spec change or restartNonce starts it again.",
    LifecycleState.deleting: "The job is being deleted (final savepoint, stop, owned objects).",
}

_TERMINAL = frozenset({LifecycleState.running, LifecycleState.suspended, LifecycleState.failed, LifecycleState.finished})
