"""Static checks that guard the design: layering contracts, lint and types, in the default run.

import-linter holds the layers (pyproject.toml ``[tool.importlinter]``: decide and the builders
stay pure, the contract imports no Spark, Kubernetes client or kopf, the operator never imports
the job runtime nor the test bed); ruff lints the tree; mypy --strict checks the contract, the operator, the
runtime and the kubectl plugin (scripts/typecheck.sh). The same commands run from
``.pre-commit-config.yaml``. Each runs the venv's own executable, beside this Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600, cwd=cwd, env=env)


def test_import_contracts_are_kept() -> None:
    result = run(str(BIN / "lint-imports"), "--config", str(REPO / "pyproject.toml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_ruff_finds_nothing() -> None:
    result = run(str(BIN / "ruff"), "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_types_are_strictly_clean() -> None:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = run("bash", str(REPO / "scripts" / "typecheck.sh"), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
