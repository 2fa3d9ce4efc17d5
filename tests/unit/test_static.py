"""Static checks that guard the design: layering contracts, lint and types, in the default run.

import-linter holds the layers (pyproject.toml ``[tool.importlinter]``: decide and the builders
stay pure, the contract imports no Spark, Kubernetes client or kopf, the operator never imports
the job runtime nor the test bed); ruff lints the tree; mypy --strict checks the contract, the operator, the
runtime and the kubectl plugin (scripts/typecheck.sh); no module of the product imports itself in a circle
(grimp, the graph import-linter reads). The same commands run from
``.pre-commit-config.yaml``. Each runs the venv's own executable, beside this Python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


PRODUCT = ("streamjob_contract", "streamjob_operator", "job_runtime", "streamjob_cli")


def import_cycles(graph: Any) -> list[list[str]]:
    """The groups of modules that import each other in a circle (strongly connected components of
    more than one module; imports inside functions and under TYPE_CHECKING count)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in graph.modules:
                continue
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_the_product_has_no_import_cycle() -> None:
    """`pytest tests/unit/test_static.py -k cycle` is the command that shows one, module by module."""
    import grimp

    graph = grimp.build_graph(*PRODUCT, cache_dir=None)
    assert len(graph.modules) > 50, sorted(graph.modules)
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_circle() -> None:
    import grimp

    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")
    graph.add_import(importer="pkg.d", imported="pkg.a")
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_test_modules_have_unique_basenames() -> None:
    """pytest imports test modules by basename (rootdir mode, no __init__.py): two test_x.py in two folders stop
    the whole run at collection, which the fast lane (tests/unit, tests/crd) alone would not show."""
    seen: dict[str, list[str]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename: {clashes}"
