"""Static checks that guard the design: layering contracts and types.

import-linter enforces that decide and the builders stay pure and that the
operator never imports the test bed; mypy checks the operator, runtime and kubectl plugin.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_import_contracts_are_kept():
    result = subprocess.run(
        [str(BIN / "lint-imports"), "--config", str(REPO / "pyproject.toml")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_operator_and_runtime_are_type_clean(tmp_path):
    # mypy resolves packages by path: give it the installed names
    (tmp_path / "streamjob_contract").symlink_to(REPO / "contract")
    (tmp_path / "streamjob_operator").symlink_to(REPO / "operator")
    (tmp_path / "job_runtime").symlink_to(REPO / "job_runtime")
    (tmp_path / "streamjob_cli").symlink_to(REPO / "cli")
    env = dict(os.environ, MYPYPATH=str(tmp_path))
    result = subprocess.run(
        [str(BIN / "mypy"), "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / ".mypy_cache"),
         "-p", "streamjob_contract", "-p", "streamjob_operator", "-p", "job_runtime", "-p", "streamjob_cli"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shutil.rmtree(tmp_path / ".mypy_cache", ignore_errors=True)
