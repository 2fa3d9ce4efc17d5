"""Reads what the runtime's sinks committed, without Spark, for the runtime tests.

- file sink: only the files listed in `_spark_metadata` (Spark's sink log) count;
  files of an aborted batch that a kill left behind are not output.
- foreachBatch sink: `path/batch_id=N/` directories, one per batch.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path

from runtime_reference import Row


def _ms(value: str) -> int:
    return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def _row(record: dict[str, object]) -> Row:
    return (
        str(record["user"]),
        _ms(str(record["window_start"])),
        _ms(str(record["window_end"])),
        int(record["events"]),  # type: ignore[arg-type]
        int(record["total"]),  # type: ignore[arg-type]
    )


def _json_rows(path: Path) -> list[Row]:
    return [_row(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def file_sink_log(directory: Path) -> dict[int, list[str]]:
    """Batch id -> files the sink committed for it; compacted entries go under their compact batch."""
    log_dir = directory / "_spark_metadata"
    entries: dict[int, list[str]] = {}
    for entry in sorted(log_dir.iterdir()):
        if entry.name.startswith("."):
            continue
        batch = int(entry.name.split(".")[0])
        lines = entry.read_text().splitlines()[1:]
        for line in lines:
            item = json.loads(line)
            if item.get("action", "add") == "add":
                entries.setdefault(batch, []).append(item["path"])
    return entries


def file_sink_rows(directory: Path, max_batch: int | None = None) -> Counter[Row]:
    rows: Counter[Row] = Counter()
    seen: set[str] = set()
    for batch, paths in sorted(file_sink_log(directory).items()):
        if max_batch is not None and batch > max_batch:
            continue
        for uri in paths:
            if uri in seen:  # a compact file repeats earlier entries
                continue
            seen.add(uri)
            rows.update(_json_rows(Path(uri.removeprefix("file://").removeprefix("file:"))))
    return rows


def batch_dirs(directory: Path) -> dict[int, Path]:
    return {int(d.name.split("=", 1)[1]): d for d in directory.glob("batch_id=*") if d.is_dir()}


def foreach_batch_rows(directory: Path, batches: range | None = None) -> Counter[Row]:
    rows: Counter[Row] = Counter()
    for batch, path in sorted(batch_dirs(directory).items()):
        if batches is not None and batch not in batches:
            continue
        assert (path / "_SUCCESS").exists(), f"{path}: batch output without _SUCCESS"
        for part in sorted(path.glob("part-*")):
            rows.update(_json_rows(part))
    return rows


def differences(got: Counter[Row], expected: Counter[Row]) -> dict[str, int]:
    """How `got` differs from `expected`, per window (user, start, end): missing windows,
    duplicated rows (a window written more than once), different values, unexpected windows."""
    def by_window(rows: Counter[Row]) -> dict[tuple[str, int, int], list[tuple[int, int]]]:
        found: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
        for (user, start, end, events, total), count in rows.items():
            found.setdefault((user, start, end), []).extend([(events, total)] * count)
        return found

    have, want = by_window(got), by_window(expected)
    return {
        "rows": sum(got.values()),
        "expected": sum(expected.values()),
        "missing": sum(1 for w in want if w not in have),
        "duplicated": sum(len(v) - 1 for v in have.values() if len(v) > 1),
        "different": sum(1 for w, v in want.items() if w in have and sorted(set(have[w])) != sorted(v)),
        "unexpected": sum(1 for w in have if w not in want),
    }
