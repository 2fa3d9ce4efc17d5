"""The runtime tests' input: examples/jobs/gen_events.py's events and their reference outputs."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import runtime_reference as reference
from runtime_harness import EXAMPLES

FILES = 10
SEED = 7
DELAY_MS = 10_000


def load_example(name: str) -> ModuleType:
    """examples/jobs/<name>.py as the module `name` (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_generator() -> ModuleType:
    return load_example("gen_events")


@dataclass(frozen=True)
class Input:
    directory: Path
    batches: list[list[reference.Ev]]

    def plan(self) -> reference.Plan:
        return reference.uninterrupted_plan(self.batches, DELAY_MS)

    def tumbling(self, plan: reference.Plan | None = None) -> Counter[reference.Row]:
        return reference.windowed(plan or self.plan(), length_ms=10_000)

    def sliding(self, plan: reference.Plan | None = None) -> Counter[reference.Row]:
        return reference.windowed(plan or self.plan(), length_ms=20_000, slide_ms=10_000)

    def sessions(self, plan: reference.Plan | None = None) -> Counter[reference.Row]:
        return reference.sessions(plan or self.plan(), gap_ms=3_000)

    def recorded_plan(self, checkpoint: Path) -> reference.Plan:
        """The micro-batches and watermarks Spark wrote to the checkpoint, batch by committed batch.

        A batch's files are the files source's log entries after the previous
        batch's offset up to its own (usually one file; after a kill, a batch
        can take two: the killed run had already logged the next file).
        """
        index = {f"events-{i:05d}.json": i for i in range(len(self.batches))}
        logged: dict[int, list[int]] = {}
        for entry in (checkpoint / "sources" / "0").iterdir():
            if entry.name.startswith("."):
                continue
            for line in entry.read_text().splitlines()[1:]:
                item = json.loads(line)
                logged.setdefault(int(item["batchId"]), []).append(index[item["path"].rsplit("/", 1)[-1]])
        committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        plan: reference.Plan = []
        last_offset = -1
        files: list[int] = []
        for batch in committed:
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
            watermark = int(json.loads(lines[1])["batchWatermarkMs"])
            offset = int(json.loads(lines[2])["logOffset"])
            read = sorted({f for entry in range(last_offset + 1, offset + 1) for f in logged[entry]})
            plan.append(([e for f in read for e in self.batches[f]], watermark))
            files += read
            last_offset = offset
        assert files == list(range(len(self.batches))), f"files read in this order: {files}"
        return plan
