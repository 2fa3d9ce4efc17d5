"""Never start fresh by accident (issue 24, section 3): a checkpoint wiped under a job is refused.

The operator passes the last batch it saw committed (status.lastCheckpoint.batchId) as
--expect-committed when a driver resumes a checkpoint. Here a real runtime commits
batches, its checkpoint is wiped (a lifecycle rule, a manual delete, an endpoint that
now points at an empty store), and the next driver, told the batch, exits
CHECKPOINT_BEHIND (15) before it writes anything, naming both batches. The way out is
explicit: without the option (spec.checkpoint.acceptBehindBatch, docs/operations.md) the
job starts from the empty checkpoint.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import Input

from streamjob_contract import checkpoint
from streamjob_contract.exitcodes import ExitCode


def files_under(path: Path) -> set[str]:
    return {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}


def test_a_wiped_checkpoint_is_refused_not_started_fresh(events: Input, processes: list[RuntimeProcess], tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    job = example_job("tumbling", events.directory, out, tmp_path / "job.json")
    first = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt.as_uri(), name="behind"), label="first")
    processes.append(first.start())
    assert first.wait(600) == ExitCode.FINISHED, first.log_tail()
    committed = checkpoint.latest_completed_batch(ckpt.as_uri())
    assert committed is not None and committed >= 5
    written = files_under(out)

    shutil.rmtree(ckpt)
    expect = ("--expect-committed", str(committed))
    refused = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt.as_uri(), name="behind", extra=expect), label="refused")
    processes.append(refused.start())
    started = time.monotonic()
    assert refused.wait(300) == ExitCode.CHECKPOINT_BEHIND, refused.log_tail()
    assert time.monotonic() - started < 60, "refused before the JVM starts"
    message = json.loads(refused.termination_file.read_text())
    assert message["outcome"] == "checkpointBehind"
    assert f"holds no committed batch, behind batch {committed} the job committed" in message["message"], message
    assert files_under(out) == written, "the refused driver wrote output"
    assert checkpoint.latest_completed_batch(ckpt.as_uri()) is None

    # the explicit way out: the operator leaves the option out once the user accepted (acceptBehindBatch)
    accepted = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt.as_uri(), name="behind"), label="accepted")
    processes.append(accepted.start())
    assert accepted.wait(600) == ExitCode.FINISHED, accepted.log_tail()
    # it ran from the empty checkpoint; the file sink's own log already lists those batch ids, so it skips
    # them: the loss the refusal exists to prevent, accepted here by the user
    assert checkpoint.latest_completed_batch(ckpt.as_uri()) is not None
