"""allowNonRestoredState end to end: a job that dropped a stateful operator restores a savepoint.

The old job deduplicates then counts per window (two stateful operators); its
savepoint is restored with --allow-non-restored-state by a job that only counts.
Spark refuses the first start; the runtime drops the deduplication's state and
starts the query again; the window counts keep theirs, so the combined output of
both jobs equals the reference (windows spanning the savepoint are counted across
it: the aggregation's state was restored, not rebuilt). The refusals (without the
flag; renumbered operators) are shown against real Spark in
tests/savepoints/test_nonrestored_state.py and in the decision table of
test_runtime_recovery_rules.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import runtime_outputs as outputs
import yaml
from runtime_harness import EXAMPLES, RuntimeProcess, run_args
from runtime_inputs import Input

from job_runtime.exitcodes import ExitCode
from job_runtime.savepoint import write_savepoint

JOBS = Path(__file__).resolve().parent / "jobs"


def entrypoint_job(function: str, events: Path, out: Path, target: Path) -> Path:
    job = yaml.safe_load((EXAMPLES / "entrypoint.yaml").read_text())
    job["entrypoint"] = f"operator_changes:{function}"
    job["pythonPath"] = [str(JOBS), str(EXAMPLES)]
    job["sources"][0]["path"] = events.as_uri()
    job["sink"]["path"] = out.as_uri()
    target.write_text(json.dumps(job))
    return target


def test_allow_non_restored_state_drops_the_removed_operators_state(
    events: Input, processes: list[RuntimeProcess], tmp_path: Path
) -> None:
    keys = [(e.user, e.ts_ms, e.amount) for batch in events.batches for e in batch]
    assert len(keys) == len(set(keys)), "the input must have no duplicates: the deduplication must change nothing"
    inputs, out, ckpt1, ckpt2 = tmp_path / "in", tmp_path / "out", tmp_path / "ckpt1", tmp_path / "ckpt2"
    inputs.mkdir()
    files = sorted(events.directory.glob("events-*.json"))
    for path in files[:5]:
        shutil.copy2(path, inputs / path.name)  # keeps the mtimes that order the files

    old = entrypoint_job("dedup_then_count", inputs, out, tmp_path / "old.json")
    first = RuntimeProcess(tmp_path / "runs", run_args(old, ckpt1.as_uri()), label="old")
    processes.append(first.start())
    assert first.wait(400) == ExitCode.FINISHED, first.log_tail()
    assert sorted(p.name for p in (ckpt1 / "state").iterdir()) == ["0", "1"]
    savepoint = tmp_path / "savepoint"
    write_savepoint(ckpt1.as_uri(), savepoint.as_uri(), job_name="job", job_namespace="tests", job_hash="", spark_version="4.3.0")
    for path in files[5:]:
        shutil.copy2(path, inputs / path.name)

    new = entrypoint_job("count", inputs, out, tmp_path / "new.json")
    args = run_args(new, ckpt2.as_uri(), extra=("--restore-from", savepoint.as_uri(), "--allow-non-restored-state"))
    allowed = RuntimeProcess(tmp_path / "runs", args, label="allowed")
    processes.append(allowed.start())
    assert allowed.wait(400) == ExitCode.FINISHED, allowed.log_tail()
    log = allowed.log_text()
    assert "restored savepoint" in log and "dropped non-restored state" in log, log
    assert "operatorId=1 operator=dedupe" in log, log
    assert log.count("started query") == 2, "started again once, after dropping the state"
    assert sorted(p.name for p in (ckpt2 / "state").iterdir()) == ["0"]

    got = outputs.file_sink_rows(out)
    expected = events.tumbling(events.recorded_plan(ckpt2))
    assert got == expected, f"duplicated or wrong: {sorted((got - expected).items())}\nmissing: {sorted((expected - got).items())}"
