"""Exit codes of the job runtime: the contract between the runtime and the operator.

The runtime (job_runtime.main) ends with one of these codes; the operator
(streamjob_operator) reads the driver container's exit code to decide what
happened, so a crash is never mistaken for a clean stop. Pure: no Spark
import, so the operator can import this module without pyspark installed.

    0   FINISHED               the query ended by itself (a bounded trigger reached its end)
    1   FAILED                 the query threw or the runtime crashed; restart per restartPolicy
    10  STOPPED_FOR_SAVEPOINT  stopped after a savepoint was written (manifest present)
    11  STOPPED_BY_REQUEST     stopped cleanly by POST /stop or SIGTERM, no savepoint
    12  INVALID_JOB            job definition or runtime configuration unusable; permanent
    13  RESTORE_REFUSED        savepoint refused or checkpoint incompatible (owned by another
                               StreamJob, damaged where a committed batch needs it, stateful
                               operators Spark cannot map to its state); permanent

Any other code (137 after SIGKILL, a JVM crash, 2 from a Python usage error
outside argparse) is a failure too: see `classify`.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ExitCode(IntEnum):
    FINISHED = 0
    FAILED = 1
    STOPPED_FOR_SAVEPOINT = 10
    STOPPED_BY_REQUEST = 11
    INVALID_JOB = 12
    RESTORE_REFUSED = 13


class Outcome(str, Enum):
    """What an exit code means to the operator."""

    finished = "finished"
    failed = "failed"
    stopped_for_savepoint = "stoppedForSavepoint"
    stopped_by_request = "stoppedByRequest"
    invalid = "invalid"
    restore_refused = "restoreRefused"


_OUTCOMES = {
    ExitCode.FINISHED: Outcome.finished,
    ExitCode.FAILED: Outcome.failed,
    ExitCode.STOPPED_FOR_SAVEPOINT: Outcome.stopped_for_savepoint,
    ExitCode.STOPPED_BY_REQUEST: Outcome.stopped_by_request,
    ExitCode.INVALID_JOB: Outcome.invalid,
    ExitCode.RESTORE_REFUSED: Outcome.restore_refused,
}

PERMANENT = frozenset({ExitCode.INVALID_JOB, ExitCode.RESTORE_REFUSED})


def classify(code: int) -> Outcome:
    """The outcome for any container exit code; unknown codes are failures."""
    try:
        return _OUTCOMES[ExitCode(code)]
    except ValueError:
        return Outcome.failed


def is_permanent(code: int) -> bool:
    """True when restarting the same spec cannot help (the operator must not restart)."""
    return code in PERMANENT


def is_clean_stop(code: int) -> bool:
    """True when the job stopped because it was asked to (with or without a savepoint)."""
    return code in (ExitCode.STOPPED_FOR_SAVEPOINT, ExitCode.STOPPED_BY_REQUEST)
