"""A job's output never goes backwards: a savepoint behind the job's committed batches is not restored silently.

Pure. Called by ``rollout.enter_deploying`` before every restore (the last check, whatever
the operation), by ``savepoint.completed`` when an upgrade or suspend savepoint turns out
behind a driver that is still committing, and by ``upgrade.start_rollback``, which
restarts from the latest checkpoint instead of rolling back to a savepoint the upgraded
driver has already committed past.

The batches compared: the savepoint's (``status.savepointHistory``, or the manifest read
this pass) and the highest committed batch the operator has seen for the job
(``status.lastCheckpoint``, from the driver's ``/status`` or, with no driver running,
from the checkpoint itself). A restore the user asked for by name (``initialSavepointPath``
on a new job or with ``savepointRedeployNonce``) may go back: that is its purpose.
"""

from __future__ import annotations

from streamjob_operator.api.spec import UpgradeMode
from streamjob_operator.api.status import OpKind, Operation

from .context import Pass, clip

WAY_OUT = ("To restore that savepoint anyway, set spec.initialSavepointPath to it and change "
           "spec.savepointRedeployNonce (its batches after the savepoint are then published again or skipped)")


def committed_batch(p: Pass) -> int | None:
    """The highest committed batch known for the job: before this pass, or seen in it."""
    known = [c.batch_id for c in (p.before.last_checkpoint, p.st.last_checkpoint) if c is not None]
    return max(known) if known else None


def savepoint_batch(p: Pass, path: str) -> int | None:
    """The committed batch a savepoint holds, when the operator recorded or read it; None when unknown."""
    manifest = p.obs.manifest
    if manifest is not None and manifest.path == path and manifest.batch_id is not None:
        return manifest.batch_id
    return next((h.batch_id for h in p.st.savepoint_history if h.path == path), None)


def asked_by_user(p: Pass, op: Operation) -> bool:
    """A restore of the savepoint the spec names, for a new job or on savepointRedeployNonce."""
    if op.kind is OpKind.deploy:
        return True
    return op.kind is not OpKind.rollback and op.trigger is None and op.savepoint_path == p.spec.initial_savepoint_path


def behind(p: Pass, path: str | None) -> tuple[int, int] | None:
    """(savepoint batch, committed batch) when restoring ``path`` would go behind what the job committed."""
    if not path:
        return None
    committed, saved = committed_batch(p), savepoint_batch(p, path)
    if committed is None or saved is None or saved >= committed:
        return None
    return saved, committed


def restore_behind(p: Pass, op: Operation) -> tuple[int, int] | None:
    """As ``behind``, for the restore ``op`` is about to deploy (None when it restores nothing or the user asked)."""
    if op.restore_mode is not UpgradeMode.savepoint or asked_by_user(p, op):
        return None
    return behind(p, op.savepoint_path)


def refusal(path: str, saved: int, committed: int, what: str) -> str:
    return clip(f"{what}: savepoint {path} holds batch {saved}, but the job has committed batch {committed}; "
                f"restoring it would publish batches {saved + 1}..{committed} again or skip them. {WAY_OUT}.")


def refuse(p: Pass, reason: str, message: str, target_hash: str | None) -> None:
    """The change is not rolled out: a blocked change (Degraded, Progressing), an event, the last error."""
    p.block(reason, message, target_hash)
    p.update(last_error=clip(message))
    p.emit("Warning", reason, message)
