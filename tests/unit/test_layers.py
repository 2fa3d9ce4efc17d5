"""The decision code stays pure: no clients, no kopf, no clock, no network (STYLE.md "Pure where possible").

The same rule is in pyproject as an import-linter contract when import-linter is configured;
this test keeps it enforced either way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import streamjob_operator

PACKAGE = Path(streamjob_operator.__file__).parent
DECIDE = sorted(str(f.relative_to(PACKAGE)) for f in (PACKAGE / "reconcile" / "decide").glob("*.py"))
PURE = [*DECIDE, "reconcile/changes.py", "reconcile/policy.py", "reconcile/names.py", "reconcile/model.py",
        "k8s/resources.py", "k8s/lease_rules.py"]
FORBIDDEN = {"kopf", "kubernetes", "boto3", "botocore", "urllib", "http", "socket", "requests", "aiohttp", "time", "random",
             "secrets", "os", "subprocess", "streamjob_operator.k8s.act", "streamjob_operator.reconcile.observe",
             "streamjob_operator.handlers"}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic"}


def test_decide_is_split_into_modules_of_a_few_hundred_lines() -> None:
    assert len(DECIDE) >= 8, DECIDE
    long = {m: n for m in DECIDE if (n := len((PACKAGE / m).read_text().splitlines())) > 300}
    assert not long, f"modules of reconcile.decide over 300 lines: {long}"


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    path = PACKAGE / module
    bad = {name for name in imports(path) if name in FORBIDDEN or name.split(".")[0] in FORBIDDEN}
    assert not bad, f"{module} imports {sorted(bad)}"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_read_no_clock(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert not set(calls) & CLOCK_CALLS, f"{module} reads the clock: {set(calls) & CLOCK_CALLS}"
