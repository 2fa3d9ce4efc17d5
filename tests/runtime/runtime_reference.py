"""An independent model of what Spark's append-mode windowed aggregation must output.

Used by the runtime tests as the oracle. Plain Python, no Spark: it replays the
input one file per micro-batch and applies the watermark rules of Spark's
stateful operators as documented and as seen in their plans:

- the watermark used by batch i (for eviction) is max(event time seen in
  batches < i) - delay, never decreasing, 0 before any data;
- an input row is late, and dropped, when its window's end <= the watermark
  of the previous batch (Spark's "watermark for late events": for the first
  stateful operator that is the watermark batch i-1 ran with);
- a window (or session) is emitted once, in the batch whose eviction
  watermark is >= its end, and forgotten;
- after the last file a no-data batch runs with the final watermark and
  emits what that closes.

Session windows: each row opens [ts, ts+gap); rows and stored sessions of a
user that overlap merge. Inputs where two sessions would exactly touch are
refused (the boundary rule is not what we test).

A run is described by its plan: the rows and the watermark of each
micro-batch. `uninterrupted_plan` derives it from the input as an
uninterrupted run has it. A run with restarts may differ: Spark 4.3 can lose
the watermark advance of a batch it re-runs from the write-ahead log after a
kill (the watermark then lags one batch), which Spark's semantics allow
("late data may or may not be aggregated"). Those tests take the plan Spark
recorded in the checkpoint's offset log instead and check the output against
it: exactly-once, given the batches and watermarks Spark chose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

LateRule = Literal["previous", "current", "never"]

Row = tuple[str, int, int, int, int]  # user, window start ms, window end ms, events, total


@dataclass(frozen=True)
class Ev:
    user: str
    ts_ms: int
    amount: int


def _window_starts(ts: int, length: int, slide: int) -> list[int]:
    last = ts - (ts % slide)
    starts = []
    start = last
    while start > ts - length:
        starts.append(start)
        start -= slide
    return starts


Plan = list[tuple[list[Ev], int]]  # per micro-batch: its rows, its (eviction) watermark


def uninterrupted_plan(batches: Sequence[Sequence[Ev]], delay_ms: int) -> Plan:
    """One file per micro-batch, then the no-data batch that the last watermark advance triggers."""
    marks = [0]
    seen: int | None = None
    for events in batches:
        for e in events:
            seen = e.ts_ms if seen is None else max(seen, e.ts_ms)
        marks.append(max(marks[-1], (seen - delay_ms) if seen is not None else 0))
    plan: Plan = [(list(events), marks[i]) for i, events in enumerate(batches)]
    if marks[-1] > marks[-2]:
        plan.append(([], marks[-1]))
    return plan


def _late_mark(marks: Sequence[int], i: int, rule: LateRule) -> int:
    """Rows whose window ends at or before this are dropped in batch i. Only "previous" is Spark's
    rule; the others exist so a test can show its input tells the rules apart."""
    if rule == "never":
        return -(2**62)
    if rule == "current":
        return marks[i]
    return marks[i - 1] if i > 0 else 0


def windowed(plan: Plan, *, length_ms: int, slide_ms: int | None = None, late: LateRule = "previous") -> Counter[Row]:
    """Tumbling (slide None) or sliding windows: count and sum of amount per user per window."""
    slide = slide_ms or length_ms
    marks = [mark for _, mark in plan]
    state: dict[tuple[str, int], list[int]] = {}
    out: Counter[Row] = Counter()
    for i, (rows, evict_mark) in enumerate(plan):
        late_mark = _late_mark(marks, i, late)
        for e in rows:
            for start in _window_starts(e.ts_ms, length_ms, slide):
                if start + length_ms <= late_mark:
                    continue
                acc = state.setdefault((e.user, start), [0, 0])
                acc[0] += 1
                acc[1] += e.amount
        for (user, start), (n, total) in sorted(state.items()):
            if start + length_ms <= evict_mark:
                out[(user, start, start + length_ms, n, total)] += 1
                del state[(user, start)]
    return out


def sessions(plan: Plan, *, gap_ms: int, late: LateRule = "previous") -> Counter[Row]:
    """Session windows per user: count and sum of amount per session."""
    marks = [mark for _, mark in plan]
    state: dict[str, list[list[int]]] = {}  # user -> [start, end, n, total]
    out: Counter[Row] = Counter()
    for i, (rows, evict_mark) in enumerate(plan):
        late_mark = _late_mark(marks, i, late)
        fresh: dict[str, list[list[int]]] = {}
        for e in rows:
            if e.ts_ms + gap_ms <= late_mark:
                continue
            fresh.setdefault(e.user, []).append([e.ts_ms, e.ts_ms + gap_ms, 1, e.amount])
        for user in sorted(set(state) | set(fresh)):
            pieces = sorted(state.get(user, []) + fresh.get(user, []))
            merged: list[list[int]] = []
            for piece in pieces:
                if merged and piece[0] == merged[-1][1]:
                    raise ValueError(f"sessions of {user} touch exactly at {piece[0]}: pick another seed")
                if merged and piece[0] < merged[-1][1]:
                    last = merged[-1]
                    last[1] = max(last[1], piece[1])
                    last[2] += piece[2]
                    last[3] += piece[3]
                else:
                    merged.append(list(piece))
            kept = []
            for start, end, n, total in merged:
                if end <= evict_mark:
                    out[(user, start, end, n, total)] += 1
                else:
                    kept.append([start, end, n, total])
            state[user] = kept
    return out


def from_generator(batches: Iterable[Iterable[object]]) -> list[list[Ev]]:
    """Convert examples/jobs/gen_events.py events (user, ts_ms, amount) to this module's."""
    return [[Ev(e.user, e.ts_ms, e.amount) for e in events] for events in batches]  # type: ignore[attr-defined]
