"""Exit codes of the job runtime: the contract between the runtime and the operator.

The runtime (job_runtime.main) ends with one of these codes and writes the code's
``outcome`` into its termination message; the operator (streamjob_operator.reconcile)
reads the driver container's exit code with ``ExitCode.of`` to decide what happened,
so a crash is never mistaken for a clean stop. One type carries the code, its name
in the termination message (``outcome``), its word in conditions and events
(``reason``) and what it means; pure, no Spark import.

    0   FINISHED               the query ended by itself (a bounded trigger reached its end)
    1   FAILED                 the query threw or the runtime crashed; restart per restartPolicy
    10  STOPPED_FOR_SAVEPOINT  stopped after a savepoint was written (manifest present)
    11  STOPPED_BY_REQUEST     stopped cleanly by POST /stop or SIGTERM, no savepoint
    12  INVALID_JOB            job definition or runtime configuration unusable; permanent
    13  RESTORE_REFUSED        savepoint refused or checkpoint incompatible (owned by another
                               StreamJob, damaged where a committed batch needs it, stateful
                               operators Spark cannot map to its state); permanent
    14  FENCED                 a newer driver took the checkpoint (its epoch, job_runtime.checkpoints.epoch):
                               this one stopped before writing output or a commit. Permanent: the
                               driver was replaced, and restarting it would fence the newer one in turn
                               (the operator never sees it from a driver it replaced; from its current
                               driver it means something else runs the job: the job fails, saying so)
    15  CHECKPOINT_BEHIND      the checkpoint's latest committed batch is behind the one the operator
                               recorded (--expect-committed): wiped, or another location; refused
                               instead of starting fresh; permanent (docs/operations.md, the way out)

Any other code (137 after SIGKILL, a JVM crash, 2 from a Python usage error
outside argparse) is a failure too: ``ExitCode.of`` gives ``FAILED``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """A runtime exit code and what it means to the operator."""

    FINISHED = 0
    FAILED = 1
    STOPPED_FOR_SAVEPOINT = 10
    STOPPED_BY_REQUEST = 11
    INVALID_JOB = 12
    RESTORE_REFUSED = 13
    FENCED = 14
    CHECKPOINT_BEHIND = 15

    @classmethod
    def of(cls, code: int) -> ExitCode:
        """The meaning of any container exit code; unknown codes are failures."""
        try:
            return cls(code)
        except ValueError:
            return cls.FAILED

    @property
    def outcome(self) -> str:
        """The code's name in the runtime's termination message (``"outcome"``)."""
        return _OUTCOMES[self]

    @property
    def reason(self) -> str:
        """The code's word in the operator's conditions and events (``InvalidJob``, ``Stopped``...)."""
        return _REASONS[self]

    @property
    def permanent(self) -> bool:
        """True when restarting the same spec cannot help (the operator must not restart)."""
        return self in (ExitCode.INVALID_JOB, ExitCode.RESTORE_REFUSED, ExitCode.FENCED, ExitCode.CHECKPOINT_BEHIND)

    @property
    def clean_stop(self) -> bool:
        """True when the job stopped because it was asked to (with or without a savepoint)."""
        return self in (ExitCode.STOPPED_FOR_SAVEPOINT, ExitCode.STOPPED_BY_REQUEST)


_OUTCOMES = {
    ExitCode.FINISHED: "finished",
    ExitCode.FAILED: "failed",
    ExitCode.STOPPED_FOR_SAVEPOINT: "stoppedForSavepoint",
    ExitCode.STOPPED_BY_REQUEST: "stoppedByRequest",
    ExitCode.INVALID_JOB: "invalid",
    ExitCode.RESTORE_REFUSED: "restoreRefused",
    ExitCode.FENCED: "fenced",
    ExitCode.CHECKPOINT_BEHIND: "checkpointBehind",
}

_REASONS = {
    ExitCode.FINISHED: "Ended",
    ExitCode.FAILED: "Failed",
    ExitCode.STOPPED_FOR_SAVEPOINT: "StoppedForSavepoint",
    ExitCode.STOPPED_BY_REQUEST: "Stopped",
    ExitCode.INVALID_JOB: "InvalidJob",
    ExitCode.RESTORE_REFUSED: "RestoreRefused",
    ExitCode.FENCED: "Fenced",
    ExitCode.CHECKPOINT_BEHIND: "CheckpointBehind",
}
