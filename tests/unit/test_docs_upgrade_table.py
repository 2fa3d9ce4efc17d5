"""docs/operations.md's upgrade table names every field of the change table (reconcile/changes.py)."""

from __future__ import annotations

import re
from pathlib import Path

from streamjob_operator.reconcile.changes import CHANGE_TABLE

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _table_fields() -> set[str]:
    text = DOC.read_text()
    section = text[text.index("## Upgrading a job"):]
    table = section[section.index("| Field | Change |"):]
    rows = []
    for line in table.splitlines():
        if not line.startswith("|"):
            break  # the table ends at its first other line
        rows.append(line)
    first_cells = [row.split("|")[1] for row in rows[2:]]
    # a row names a field (`checkpoint`) or a nested one with its own change path (`checkpoint.acceptBehindBatch`)
    return {key for cell in first_cells for name in re.findall(r"`([A-Za-z0-9.]+)`", cell) for key in (name, name.split(".")[0])}


def test_every_spec_field_with_a_change_path_is_in_the_upgrade_table():
    missing = sorted(set(CHANGE_TABLE) - _table_fields())
    assert not missing, f"docs/operations.md, 'Upgrading a job': no row names {missing} (operator/reconcile/changes.py)"
