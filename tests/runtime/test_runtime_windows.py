"""The example window jobs (tumbling, sliding, session) against the independent reference.

Each job runs as a real runtime process over the same deterministic input
(one file per micro-batch, out-of-order and late events) with a bounded
trigger, and its committed output must equal tests/runtime/reference.py's,
row for row: a wrong watermark rule, a duplicate or a missing window fails it.
The three run at once to keep the wall time down.
"""

from __future__ import annotations

from pathlib import Path

import runtime_outputs as outputs
import runtime_reference as reference
from runtime_inputs import Input
from runtime_harness import RuntimeProcess, example_job, run_args


def test_input_tells_the_watermark_rules_apart(events: Input) -> None:
    # Without late rows, or if the late rule did not matter, the tests below could not fail on it.
    plan = events.plan()
    assert events.tumbling() != reference.windowed(plan, length_ms=10_000, late="never")
    assert events.sessions() != reference.sessions(plan, gap_ms=3_000, late="never")
    spark_rule = [events.tumbling(), events.sliding(), events.sessions()]
    current_rule = [
        reference.windowed(plan, length_ms=10_000, late="current"),
        reference.windowed(plan, length_ms=20_000, slide_ms=10_000, late="current"),
        reference.sessions(plan, gap_ms=3_000, late="current"),
    ]
    assert spark_rule != current_rule
    assert all(len(r) >= 8 for r in spark_rule)


def test_window_kinds_equal_the_reference(events: Input, processes: list[RuntimeProcess], tmp_path: Path) -> None:
    expected = {"tumbling": events.tumbling(), "sliding": events.sliding(), "session": events.sessions()}
    for kind in expected:
        job = example_job(kind, events.directory, tmp_path / "out" / kind, tmp_path / f"{kind}.json")
        proc = RuntimeProcess(tmp_path / kind, run_args(job, (tmp_path / "ckpt" / kind).as_uri(), name=kind), label=kind)
        processes.append(proc.start())
    for proc in processes:
        assert proc.wait(600) == 0, proc.log_tail()
        assert proc.termination()["outcome"] == "finished"
    for kind in expected:  # the reference's watermark model is Spark's, batch for batch
        assert events.recorded_plan(tmp_path / "ckpt" / kind) == events.plan(), kind
    assert outputs.file_sink_rows(tmp_path / "out" / "tumbling") == expected["tumbling"]
    assert outputs.file_sink_rows(tmp_path / "out" / "sliding") == expected["sliding"]
    assert outputs.foreach_batch_rows(tmp_path / "out" / "session") == expected["session"]
