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


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_events", EXAMPLES / "gen_events.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_events"] = module
    spec.loader.exec_module(module)
    return module


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
        """The micro-batches and watermarks Spark wrote to the checkpoint's offset log.

        The files source's offset is the index of the last file read; with one
        file per trigger, a batch whose offset moved on read exactly the next file.
        """
        plan: reference.Plan = []
        last_file = -1
        offsets = sorted((int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()))
        committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
        for batch in offsets:
            if batch not in committed:
                continue
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
            watermark = int(json.loads(lines[1])["batchWatermarkMs"])
            log_offset = int(json.loads(lines[2])["logOffset"])
            assert log_offset in (last_file, last_file + 1), f"batch {batch} skipped files: offset {log_offset} after {last_file}"
            rows = self.batches[log_offset] if log_offset == last_file + 1 else []
            plan.append((rows, watermark))
            last_file = log_offset
        assert last_file == len(self.batches) - 1, f"the checkpoint read {last_file + 1} of {len(self.batches)} files"
        return plan
