"""Writes a deterministic stream of user events, with out-of-order and late ones, as JSON files.

Used by the example jobs in this folder (tumbling.yaml, sliding.yaml,
session.yaml, entrypoint.yaml), by tests/runtime and by the runtime benchmark.
File i holds the events that "arrived" in the i-th slice of `step` seconds;
files get increasing modification times so a files source with
maxFilesPerTrigger=1 reads exactly one file per micro-batch, in order.

Each user is active in short bursts (so session windows close); some events
arrive a few seconds late (out of order, still inside a 10-second watermark)
and some arrive half a minute late (behind the watermark: Spark drops them).

    python examples/jobs/gen_events.py /tmp/streamjob-examples/events --files 12 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
USERS = ("alice", "bob", "carol")


@dataclass(frozen=True)
class Event:
    user: str
    ts_ms: int
    amount: int

    def to_json(self) -> str:
        ts = datetime.fromtimestamp(self.ts_ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")
        return json.dumps({"user": self.user, "ts": ts.replace("+00:00", "Z"), "amount": self.amount})


def generate(files: int = 12, seed: int = 7, step_s: float = 8.0, users: tuple[str, ...] = USERS) -> list[list[Event]]:
    """The events of each file, in file order. Pure: same arguments, same events."""
    rng = random.Random(seed)
    step_ms = int(step_s * 1000)
    batches: list[list[Event]] = []
    for i in range(files):
        start = BASE_MS + i * step_ms
        events: list[Event] = []
        for user in users:
            for _ in range(rng.choice((1, 1, 2))):  # bursts of activity
                centre = start + rng.randrange(0, step_ms)
                for _ in range(rng.randint(1, 3)):
                    events.append(Event(user, centre + rng.randrange(-800, 800), rng.randint(1, 9)))
        if i >= 1 and rng.random() < 0.7:  # out of order, inside the watermark
            events.append(Event(rng.choice(users), start - rng.randrange(2_000, 9_000), rng.randint(1, 9)))
        if i >= 3 and rng.random() < 0.6:  # far behind the watermark: dropped
            events.append(Event(rng.choice(users), start - rng.randrange(30_000, 40_000), rng.randint(1, 9)))
        rng.shuffle(events)
        batches.append(events)
    return batches


def write(directory: Path, batches: list[list[Event]], first_mtime: float | None = None, large: int = 0) -> list[Path]:
    """One JSON-lines file per batch, written atomically, mtimes one second apart in order."""
    directory.mkdir(parents=True, exist_ok=True)
    first = first_mtime if first_mtime is not None else time.time() - len(batches) - 10
    paths = []
    for i, events in enumerate(batches):
        path = directory / f"events-{i:05d}.json"
        tmp = directory / f".events-{i:05d}.json.tmp"  # hidden: the files source skips it
        tmp.write_text("".join(e.to_json() + "\n" for e in events))
        os.utime(tmp, (first + i, first + i))
        tmp.replace(path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    paths = write(args.directory, generate(args.files, args.seed))
    print(f"wrote {len(paths)} files to {args.directory}")


if __name__ == "__main__":
    main()
