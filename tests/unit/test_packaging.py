"""Packaging: the folders install under their package names, the console scripts answer, the version is set once,
and the product's wheel holds the product only (the test bed is a distribution of its own, testbed/pyproject.toml)."""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
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


PRODUCT_SCRIPTS = ["streamjob-operator", "streamjob-runtime", "streamjob-savepoints", "kubectl-streamjob"]


@pytest.mark.parametrize("script", [*PRODUCT_SCRIPTS, "streamjob-testbed"])
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


def test_the_product_wheel_holds_no_test_bed(tmp_path):
    """Built as the images build it (pip wheel --no-deps), from a tree that also holds testbed/."""
    src = tmp_path / "src"
    for name in ("contract", "operator", "job_runtime", "cli", "testbed"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(src)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "dist").glob("streamjob-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = {line.split(" = ")[0] for line in archive.read(entry_points).decode().splitlines() if " = " in line}
    assert {name.split("/")[0] for name in names} == {
        "streamjob_contract", "streamjob_operator", "job_runtime", "streamjob_cli", wheel.name.split("-py3")[0] + ".dist-info",
    }, sorted({name.split("/")[0] for name in names})
    assert sorted(scripts) == sorted(PRODUCT_SCRIPTS)


def test_the_test_bed_is_installed_as_its_own_distribution():
    """The dev venv has it beside the product (scripts/bootstrap.sh, README), under its own name and script."""
    testbed = importlib.metadata.distribution("streamjob-testbed")
    assert {e.name for e in testbed.entry_points if e.group == "console_scripts"} == {"streamjob-testbed"}
    product = importlib.metadata.distribution("streamjob")
    assert {e.name for e in product.entry_points if e.group == "console_scripts"} == set(PRODUCT_SCRIPTS)


def dockerfile_pip_requirements() -> dict[str, str]:
    """name -> specifier of what the runtime image's pip line installs (the Dockerfile's `pip install ... pyspark==`)."""
    import re

    text = (REPO / "Dockerfile").read_text()
    line = next(line for line in text.splitlines() if "pip install" in line and "pyspark==" in line)
    found = re.findall(r'"([A-Za-z0-9_.-]+)([<>=!~][^"]*)"|\b(pyspark)(==[0-9.]+)', line)
    return {(a or c).lower(): (b or d) for a, b, c, d in found}


def test_the_runtime_image_installs_the_products_runtime_dependencies_within_their_declared_ranges():
    """The image's pip line and pyproject.toml say the same ranges, and the image's pins satisfy them:
    a pyarrow raised in one and not the other is caught here, not in a job's first batch."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    declared = {Requirement(r).name.lower(): Requirement(r).specifier
                for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    image = dockerfile_pip_requirements()
    assert {"pyspark", "confluent-kafka", "pyarrow"} <= set(image), image
    pins = {line.split("==")[0].strip().lower(): line.split("==")[1].strip()
            for line in (REPO / "images" / "constraints.txt").read_text().splitlines()
            if "==" in line and not line.lstrip().startswith("#")}
    for name, spec in image.items():
        if spec.startswith("=="):  # pinned in the image: inside the product's range
            assert spec[2:] in declared[name], f"Dockerfile installs {name}{spec}, pyproject.toml says {declared[name]}"
        else:
            assert SpecifierSet(spec) == declared[name], f"Dockerfile says {name}{spec}, pyproject.toml {declared[name]}"
        if name in pins:
            assert pins[name] in declared[name], f"images/constraints.txt pins {name}=={pins[name]}, outside {declared[name]}"
