"""When an imperative command's ``--wait`` is over, and how it went.

Pure: each function takes the StreamJob (a dict as the API server returns it) and
what was true before the change, and returns an ``Outcome``. Called by
``streamjob_cli.main`` on every poll; tested as tables. The rules follow what the
operator writes to status (``reconcile.decide``): it records the nonce it acted on
(``lastSavepointNonce``, ``lastRestartNonce``), the operation in progress, the last
savepoint, the Savepointing condition and a blocked change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamjob_contract.lifecycle import LifecycleState


@dataclass(frozen=True)
class Outcome:
    done: bool
    ok: bool = False
    message: str = ""


def progress(job: dict[str, Any]) -> str:
    """One line for the progress display: state and the operation's phase."""
    status = job.get("status") or {}
    text = f"state {status.get('state') or '-'}"
    op = status.get("operation")
    if op:
        text += f", {op.get('kind')} {op.get('phase')}"
        if op.get("message"):
            text += f" ({op['message']})"
    return text


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), {})


def _observed(job: dict[str, Any], generation: int) -> bool:
    return int((job.get("status") or {}).get("observedGeneration") or 0) >= generation


def savepoint(job: dict[str, Any], nonce: int, before_path: str | None) -> Outcome:
    """A manual savepoint asked for with ``savepointNonce = nonce``."""
    status = job.get("status") or {}
    if int(status.get("lastSavepointNonce") or 0) < nonce:
        return Outcome(False)
    op = status.get("operation") or {}
    if op.get("kind") == "savepoint":
        return Outcome(False)
    last = status.get("lastSavepoint") or {}
    if last.get("path") and last.get("path") != before_path:
        return Outcome(True, True, str(last["path"]))
    if op:  # another operation (e.g. an upgrade) took precedence; the savepoint may still follow
        return Outcome(False)
    cond = _condition(status, "Savepointing")
    if cond.get("reason") == "SavepointFailed":
        return Outcome(True, False, str(cond.get("message") or "the savepoint failed"))
    return Outcome(True, False, status.get("lastError") or "the operator took no savepoint (see `kubectl streamjob status`)")


def suspended(job: dict[str, Any], generation: int, before_blocked: dict[str, Any] | None) -> Outcome:
    """``spec.state: suspended`` applied at ``generation``."""
    status = job.get("status") or {}
    if not _observed(job, generation):
        return Outcome(False)
    if status.get("state") == LifecycleState.suspended:
        return Outcome(True, True, "Suspended")
    blocked = status.get("blockedChange")
    if blocked and blocked != before_blocked and not status.get("operation"):
        return Outcome(True, False, f"{blocked.get('reason')}: {blocked.get('message', '')}")
    return _failed(status)


def running(job: dict[str, Any], generation: int) -> Outcome:
    """``spec.state: running`` applied at ``generation``: Running and ready."""
    status = job.get("status") or {}
    if not _observed(job, generation):
        return Outcome(False)
    return _running_or_failed(status)


def restarted(job: dict[str, Any], nonce: int) -> Outcome:
    """A restart asked for with ``restartNonce = nonce``: acted on, then Running and ready."""
    status = job.get("status") or {}
    if int(status.get("lastRestartNonce") or 0) < nonce:
        return Outcome(False)
    return _running_or_failed(status)


def _running_or_failed(status: dict[str, Any]) -> Outcome:
    """Done when the job runs its spec and is ready (ok), or has failed (not ok)."""
    if status.get("state") == LifecycleState.running and status.get("ready") and not status.get("operation"):
        return Outcome(True, True, f"Running on {status.get('driverPod')}")
    return _failed(status)


def _failed(status: dict[str, Any]) -> Outcome:
    if status.get("state") == LifecycleState.failed:
        return Outcome(True, False, f"the job failed: {status.get('lastError') or 'see `kubectl streamjob status`'}")
    return Outcome(False)
