"""The runtime tests' input: examples/jobs/gen_events.py's events and their reference outputs."""

from __future__ import annotations

import importlib.util
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

    def tumbling(self) -> Counter[reference.Row]:
        return reference.windowed(self.batches, length_ms=10_000, delay_ms=DELAY_MS)

    def sliding(self) -> Counter[reference.Row]:
        return reference.windowed(self.batches, length_ms=20_000, slide_ms=10_000, delay_ms=DELAY_MS)

    def sessions(self) -> Counter[reference.Row]:
        return reference.sessions(self.batches, gap_ms=3_000, delay_ms=DELAY_MS)


