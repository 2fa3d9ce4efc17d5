"""docs/chart-values.md is what scripts/chart_values_doc.py makes of charts/streamjob/values.yaml."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("chart_values_doc", REPO / "scripts" / "chart_values_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_doc_matches_values_yaml():
    gen = _generator()
    assert (REPO / "docs" / "chart-values.md").read_text() == gen.render(gen.VALUES.read_text()), (
        "docs/chart-values.md is out of date: run python scripts/chart_values_doc.py"
    )


def test_every_value_has_a_row():
    """Each value is a row, or inside a row's default (a flow map such as resources.requests)."""
    gen = _generator()
    import yaml

    def paths(data, prefix=""):
        for key, value in data.items():
            yield f"{prefix}{key}"
            if isinstance(value, dict):
                yield from paths(value, f"{prefix}{key}.")

    rows = [r.path for r in gen.rows(gen.VALUES.read_text())]
    values = yaml.safe_load(gen.VALUES.read_text())
    missing = [p for p in paths(values) if not any(p == r or p.startswith(r + ".") for r in rows)]
    assert not missing and len(rows) == len(set(rows))


def test_comments_become_descriptions():
    gen = _generator()
    text = (
        "# Block comment\n# on two lines.\n"
        "a: 1   # and inline\n"
        "\n# lost: a blank line follows\n\n"
        "b:\n  c: \"x # not a comment\"\n  d: {e: 1}   # flow map\n"
    )
    got = {r.path: r for r in gen.rows(text)}
    assert got["a"].description == "Block comment on two lines. and inline"
    assert got["a"].default == "`1`"
    assert got["b"].section and got["b"].description == ""
    assert got["b.c"].default == "`x # not a comment`" and got["b.c"].description == ""
    assert got["b.d"].default == '`{"e": 1}`' and got["b.d"].description == "flow map"
