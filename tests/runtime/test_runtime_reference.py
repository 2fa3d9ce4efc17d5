"""The oracle's own truth table: small inputs whose Spark output was worked out by hand.

The first case is the one that pins the late-event rule: a row for a window
that the *current* watermark already closes is still counted, because Spark
drops rows by the previous batch's watermark and evicts by the current one.
"""

from __future__ import annotations

from collections import Counter

import pytest

from runtime_reference import Ev, sessions, uninterrupted_plan, windowed

S = 1000


def ev(user: str, second: float, amount: int = 1) -> Ev:
    return Ev(user, int(second * S), amount)


@pytest.mark.parametrize(
    ("batches", "late", "expected"),
    [
        pytest.param(
            [[ev("a", 1), ev("a", 5), ev("b", 12)], [ev("a", 25), ev("b", 3)], [ev("a", 40), ev("b", 14), ev("a", 2)], [ev("a", 60)]],
            "previous",
            {("a", 0, 10, 3, 3), ("b", 0, 10, 1, 1), ("b", 10, 20, 2, 2), ("a", 20, 30, 1, 1), ("a", 40, 50, 1, 1)},
            id="late-row-counted-until-previous-watermark",
        ),
        pytest.param(
            [[ev("a", 1), ev("a", 5), ev("b", 12)], [ev("a", 25), ev("b", 3)], [ev("a", 40), ev("b", 14), ev("a", 2)], [ev("a", 60)]],
            "current",
            {("a", 0, 10, 2, 2), ("b", 0, 10, 1, 1), ("b", 10, 20, 2, 2), ("a", 20, 30, 1, 1), ("a", 40, 50, 1, 1)},
            id="current-watermark-rule-differs",
        ),
        pytest.param(
            [[ev("a", 30)], [ev("a", 31)], [ev("a", 2)], [ev("a", 50)]],
            "previous",
            {("a", 30, 40, 2, 2)},
            id="row-behind-previous-watermark-dropped",
        ),
        pytest.param(
            [[ev("a", 1)], [ev("a", 9)]],
            "previous",
            set(),
            id="nothing-emitted-before-watermark-passes-window-end",
        ),
    ],
)
def test_tumbling(batches: list[list[Ev]], late: str, expected: set[tuple[str, int, int, int, int]]) -> None:
    got = windowed(uninterrupted_plan(batches, 10 * S), length_ms=10 * S, late=late)  # type: ignore[arg-type]
    assert got == Counter({(u, a * S, b * S, n, t): 1 for u, a, b, n, t in expected})


def test_sliding_counts_each_row_in_every_window_it_falls_in() -> None:
    got = windowed(uninterrupted_plan([[ev("a", 12)], [ev("a", 60)]], 5 * S), length_ms=20 * S, slide_ms=10 * S)
    # The watermark ends at 55 s: the windows of the row at 60 s ([50, 70), [60, 80)) stay open.
    assert got == Counter({("a", 0, 20 * S, 1, 1): 1, ("a", 10 * S, 30 * S, 1, 1): 1})


def test_sessions_merge_across_batches_and_close_on_the_watermark() -> None:
    got = sessions(uninterrupted_plan([[ev("a", 1), ev("a", 2.5)], [ev("a", 4), ev("b", 4)], [ev("a", 30)]], 5 * S), gap_ms=3 * S)
    assert got == Counter({("a", 1 * S, 7 * S, 3, 3): 1, ("b", 4 * S, 7 * S, 1, 1): 1})


def test_sessions_refuse_touching_boundaries() -> None:
    with pytest.raises(ValueError, match="touch exactly"):
        sessions(uninterrupted_plan([[ev("a", 1), ev("a", 4)]], 5 * S), gap_ms=3 * S)


def test_a_lagging_watermark_counts_a_late_row() -> None:
    # What a restart can do: batch 1 re-run from the write-ahead log keeps batch 0's watermark.
    rows = [[ev("a", 12)], [ev("a", 31)], [ev("a", 35)], [ev("a", 15)], [ev("a", 60)]]
    steady = uninterrupted_plan(rows, 10 * S)
    assert [m for _, m in steady] == [0, 2 * S, 21 * S, 25 * S, 25 * S, 50 * S]
    lagging = [(r, m) for (r, _), m in zip(steady, [0, 2 * S, 2 * S, 21 * S, 25 * S, 50 * S])]
    assert windowed(steady, length_ms=10 * S)[("a", 10 * S, 20 * S, 1, 1)] == 1
    assert windowed(lagging, length_ms=10 * S)[("a", 10 * S, 20 * S, 2, 2)] == 1
