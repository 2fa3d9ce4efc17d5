"""The decision code stays pure: no clock reads, and small modules (STYLE.md "Pure where possible").

What the pure modules may import is stated once, as an import-linter contract in pyproject.toml
("decide and the builders are pure"), checked by test_static; this test checks what an import
rule cannot: that they do not call the clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import streamjob_operator

PACKAGE = Path(streamjob_operator.__file__).parent
DECIDE = sorted(str(f.relative_to(PACKAGE)) for f in (PACKAGE / "reconcile" / "decide").glob("*.py"))
PURE = [*DECIDE, "reconcile/changes.py", "reconcile/policy.py", "reconcile/names.py", "reconcile/model.py",
        "k8s/resources.py", "k8s/lease_rules.py", "slots.py", "progress.py", "dispatch.py"]
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic"}


def test_decide_is_split_into_modules_of_a_few_hundred_lines() -> None:
    assert len(DECIDE) >= 8, DECIDE
    long = {m: n for m in DECIDE if (n := len((PACKAGE / m).read_text().splitlines())) > 300}
    assert not long, f"modules of reconcile.decide over 300 lines: {long}"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_read_no_clock(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert not set(calls) & CLOCK_CALLS, f"{module} reads the clock: {set(calls) & CLOCK_CALLS}"
