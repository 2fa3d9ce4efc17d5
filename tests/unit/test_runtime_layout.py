"""The job runtime's rooms stay small and its rules pure (STYLE.md "Small modules", "Pure where possible").

What the pure modules and the subpackages may import is stated once, as import-linter contracts in
pyproject.toml ("the runtime's layers", "the runtime's rules are pure"), checked by test_static;
this checks what an import rule cannot: module sizes, and that the rules do not call the clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import job_runtime

PACKAGE = Path(job_runtime.__file__).parent
MODULES = sorted(str(f.relative_to(PACKAGE)) for f in PACKAGE.rglob("*.py"))
PURE = ["settings.py", "query/progress.py", "query/errors.py", "checkpoints/hygiene.py", "savepoints/target.py"]
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic"}


def test_no_runtime_module_is_over_400_lines() -> None:
    long = {m: n for m in MODULES if (n := len((PACKAGE / m).read_text().splitlines())) > 400}
    assert not long, f"modules of job_runtime over 400 lines: {long}"


@pytest.mark.parametrize("module", PURE)
def test_pure_rules_do_not_read_the_clock(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    calls = {
        node.func.attr for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_CALLS
    }
    assert not calls, f"{module} calls {calls}"
