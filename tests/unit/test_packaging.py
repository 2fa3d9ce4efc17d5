"""Packaging: the folders install under their package names, the console scripts answer, the version is set once."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_stdlib_operator_is_not_shadowed():
    import operator

    assert hasattr(operator, "itemgetter"), operator  # the standard library's, not the operator/ folder
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


def test_the_version_is_set_once_and_the_chart_follows_it():
    import tomllib

    import yaml

    import streamjob_contract

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((REPO / "charts" / "streamjob" / "Chart.yaml").read_text())
    assert (streamjob_contract.__version__, chart["appVersion"]) == (declared, declared)
