"""The exit-code contract between the runtime and the operator: one type, its meaning per code."""

from __future__ import annotations

import pytest

from streamjob_contract.exitcodes import ExitCode


@pytest.mark.parametrize(
    ("code", "meaning", "outcome", "reason", "permanent", "clean_stop"),
    [
        pytest.param(0, ExitCode.FINISHED, "finished", "Ended", False, False, id="finished"),
        pytest.param(1, ExitCode.FAILED, "failed", "Failed", False, False, id="failed"),
        pytest.param(10, ExitCode.STOPPED_FOR_SAVEPOINT, "stoppedForSavepoint", "StoppedForSavepoint", False, True, id="savepoint"),
        pytest.param(11, ExitCode.STOPPED_BY_REQUEST, "stoppedByRequest", "Stopped", False, True, id="stop"),
        pytest.param(12, ExitCode.INVALID_JOB, "invalid", "InvalidJob", True, False, id="invalid"),
        pytest.param(13, ExitCode.RESTORE_REFUSED, "restoreRefused", "RestoreRefused", True, False, id="restore-refused"),
        pytest.param(14, ExitCode.FENCED, "fenced", "Fenced", True, False, id="fenced"),
        pytest.param(15, ExitCode.CHECKPOINT_BEHIND, "checkpointBehind", "CheckpointBehind", True, False, id="checkpoint-behind"),
        pytest.param(137, ExitCode.FAILED, "failed", "Failed", False, False, id="sigkill-is-failure"),
        pytest.param(143, ExitCode.FAILED, "failed", "Failed", False, False, id="sigterm-death-is-failure"),
        pytest.param(2, ExitCode.FAILED, "failed", "Failed", False, False, id="unknown-is-failure"),
    ],
)
def test_exit_code_table(code: int, meaning: ExitCode, outcome: str, reason: str, permanent: bool,
                         clean_stop: bool) -> None:
    found = ExitCode.of(code)
    assert (found, found.outcome, found.reason, found.permanent, found.clean_stop) == (
        meaning, outcome, reason, permanent, clean_stop)
