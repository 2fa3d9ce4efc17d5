"""``streamjob-savepoints`` (job_runtime.savepoints.cli) on local files: the exit codes and where each message goes.

0 done (the result on stdout), 2 bad usage (click's usage on stderr), 3 refused (one line
on stderr naming the path; with --json also ``{"error", "kind"}`` on stdout). The S3 paths
and the destructive commands' prompts run against the test bed in tests/savepoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from job_runtime.savepoints.cli import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, main


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint with two committed batches (the listing is all latest-checkpoint reads)."""
    root = tmp_path / "checkpoint"
    for log in ("offsets", "commits"):
        (root / log).mkdir(parents=True)
        for batch in (0, 1):
            (root / log / str(batch)).write_text("v1\n")
    return root


@pytest.mark.parametrize(
    ("args", "code", "stdout", "stderr"),
    [
        pytest.param(["--json", "latest-checkpoint", "{cp}"], EXIT_OK, '"batch_id": 1', "", id="latest-json"),
        pytest.param(["latest-checkpoint", "{cp}"], EXIT_OK, "1", "", id="latest-text"),
        pytest.param(["latest-checkpoint", "{tmp}/empty"], EXIT_OK, "none", "", id="latest-none"),
        pytest.param(["validate", "{cp}"], EXIT_REFUSED, "", "refused: {cp}: no _savepoint.json", id="validate-not-a-savepoint"),
        pytest.param(["--json", "inspect", "{cp}"], EXIT_REFUSED, '"kind": "SavepointNotFoundError"',
                     "refused: {cp}: no _savepoint.json", id="inspect-refused-json"),
        pytest.param(["delete", "--yes", "{cp}"], EXIT_REFUSED, "", "refused: {cp}: no _savepoint.json", id="delete-needs-a-manifest"),
        pytest.param(["latest-checkpoint", "ftp://x"], EXIT_REFUSED, "", "refused: ftp://x: unsupported scheme", id="bad-scheme"),
        pytest.param(["validate"], EXIT_USAGE, "", "Missing argument 'URI'", id="usage-missing-argument"),
        pytest.param(["restore", "{cp}", "{tmp}/new"], EXIT_USAGE, "", "Missing option '--partitions'", id="usage-missing-option"),
        pytest.param(["bogus"], EXIT_USAGE, "", "No such command 'bogus'", id="usage-unknown-command"),
    ],
)
def test_exit_codes_and_messages(
    args: list[str], code: int, stdout: str, stderr: str, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def fill(text: str) -> str:
        return text.format(cp=checkpoint, tmp=tmp_path)

    assert main([fill(a) for a in args]) == code
    out, err = capsys.readouterr()
    assert fill(stdout) in out
    assert fill(stderr) in err
    if code == EXIT_OK:
        assert err == ""
    if "--json" in args:
        json.loads(out)


def test_delete_refused_untouched_without_a_terminal(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing is a savepoint here, so nothing is asked and nothing deleted."""
    assert main(["delete", str(checkpoint)]) == EXIT_REFUSED
    assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == ["0", "1"]
