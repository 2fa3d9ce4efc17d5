"""`.testbed/env` gives a fresh shell what the docs use: kubectl, and streamjob-savepoints on the test bed's S3."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from testbed import TestBed
from testbed.cli import _env_lines


def test_env_file_puts_kubectl_and_the_savepoint_cli_on_path(testbed: TestBed, tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text("\n".join(_env_lines(testbed, testbed.kubeconfig)) + "\n")
    prefix = f"env-file-{uuid.uuid4().hex[:8]}"  # empty: listing it needs the test bed's endpoint and keys
    # a shell with nothing of ours on PATH, as a user's terminal before `source .testbed/env`
    script = (
        f"source {env_file} && command -v streamjob-savepoints && command -v kubectl"
        f" && kubectl get namespace default -o name"
        f" && streamjob-savepoints --json list s3://streamjob/{prefix}/"
    )
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == str(Path(sys.executable).parent / "streamjob-savepoints")
    assert "namespace/default" in lines
    assert json.loads("\n".join(lines[lines.index("namespace/default") + 1:])) == []
