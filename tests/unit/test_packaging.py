"""The operator/ folder installs as streamjob_operator and never shadows the stdlib."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def test_stdlib_operator_is_not_shadowed():
    import operator

    assert operator.eq(1, 1)
    assert not str(getattr(operator, "__file__", "")).endswith("operator/__init__.py")


def test_operator_folder_is_importable_under_its_own_name():
    pkg = importlib.import_module("streamjob_operator")
    assert Path(pkg.__file__).parent.name == "operator"


@pytest.mark.parametrize("script", ["streamjob-operator", "streamjob-runtime", "streamjob-savepoints", "streamjob-testbed", "kubectl-streamjob"])
def test_console_script_is_installed_and_answers_help(script):
    path = shutil.which(script) or str(Path(sys.executable).parent / script)
    result = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
