"""Two drivers of one job on one checkpoint at once: the newer one wins, the older one is fenced.

The lost-node case (issue 24, section 1): the operator force-deletes a driver stuck
terminating and starts a new one on the same checkpoint while the old process still
reaches the checkpoint's store and the broker. Here both are real runtime processes:
the second starts while the first is running batches. The first must exit FENCED (14)
before it writes more output or commits (job_runtime.checkpoints.epoch), the second
must carry the stream to its end, and the output must hold every row exactly once: for
the exactly-once Kafka sink (read_committed consumer against the reference computed
without Spark) and for the file sink (its committed output against the batches Spark
recorded). Before the fence, the second driver died at its first offset-log write
(CONCURRENT_STREAM_LOG_UPDATE) and the first ran on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import runtime_outputs as outputs
from runtime_harness import RuntimeProcess, example_job, run_args
from runtime_inputs import Input
from runtime_kafka import committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics

from streamjob_contract.exitcodes import ExitCode

WAIT = 240.0
FENCE_WAIT = 120.0  # the old driver stops at its next check (1 s) once the new one took its epoch (before its JVM)
EPOCH_DIR = "_streamjob_epochs"  # job_runtime.checkpoints.epoch: literal, so this test runs against code without it


def latest(status: dict[str, Any]) -> int:
    found = status["latestCompletedBatch"]
    return -1 if found is None else int(found)


def epochs(ckpt: Path) -> list[int]:
    return sorted(int(p.name) for p in (ckpt / EPOCH_DIR).iterdir() if p.name.isdigit())


def drained(ckpt: Path, files: int) -> bool:
    """Every input file read and the batch without data that closes the last windows committed: the last two
    committed batches both end at the files source's last log entry. Counted from the checkpoint, not as a
    number of batches: a batch takes two files when the fenced run had logged the next file before it stopped."""
    commits = sorted(int(p.name) for p in (ckpt / "commits").iterdir() if p.name.isdigit())

    def log_offset(batch: int) -> int:
        return int(json.loads((ckpt / "offsets" / str(batch)).read_text().splitlines()[2])["logOffset"])

    return len(commits) >= 2 and log_offset(commits[-1]) == log_offset(commits[-2]) == files - 1


def test_a_second_driver_fences_the_first_kafka_sink_exactly_once(kafka_broker: Any, processes: list[RuntimeProcess],
                                                                   tmp_path: Path) -> None:
    gen = load_events_module()
    source, target = topics(kafka_broker)
    events = gen.generate(900)  # 9 batches of maxOffsetsPerTrigger=100
    gen.produce(kafka_broker.bootstrap, source, events[:500])
    expected = reference_windows(events)
    job = kafka_job(kafka_broker, source, target, tmp_path / "job.json")
    ckpt = tmp_path / "ckpt"

    old = start_run(processes, tmp_path, job, ckpt, name="fenced", label="old", trigger="2 seconds")
    old.wait_for("batch 1 committed", lambda s: latest(s) >= 1, timeout=WAIT)
    # the old driver still runs (batches 2..4 to go) and reaches the checkpoint and the broker
    new = start_run(processes, tmp_path, job, ckpt, name="fenced", label="new", trigger="500 milliseconds")
    code = old.wait(FENCE_WAIT)
    assert code == ExitCode.FENCED, old.log_tail()
    assert "a newer driver took it" in old.log_text() or "fenced at batch" in old.log_text(), old.log_tail()
    assert epochs(ckpt) == [1, 2]

    gen.produce(kafka_broker.bootstrap, source, events[500:])
    seen = committed_windows(kafka_broker.bootstrap, target, sum(expected.values()), timeout=WAIT)
    assert new.proc is not None and new.proc.poll() is None, new.log_tail()
    new.terminate()
    assert new.wait(300) == ExitCode.STOPPED_BY_REQUEST, new.log_tail()
    seen = committed_windows(kafka_broker.bootstrap, target)
    assert seen == expected, {"duplicated": sorted((seen - expected).items()), "missing": sorted((expected - seen).items())}


def test_a_second_driver_fences_the_first_file_sink_exactly_once(events: Input, processes: list[RuntimeProcess],
                                                                  tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    job = example_job("tumbling", events.directory, out, tmp_path / "job.json")
    files = len(events.batches)  # one file a batch (maxFilesPerTrigger 1), except where the old run logged one more

    old = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt.as_uri(), name="fenced", trigger="3 seconds"), label="old")
    processes.append(old.start())
    old.wait_for("batch 1 committed", lambda s: latest(s) >= 1, timeout=WAIT)
    new = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt.as_uri(), name="fenced", trigger="1 second"), label="new")
    processes.append(new.start())
    code = old.wait(FENCE_WAIT)
    assert code == ExitCode.FENCED, old.log_tail()
    fenced_at = outputs.file_sink_log(out)
    assert max(fenced_at) < files - 1, "the old driver was fenced while it still had batches to run"
    assert epochs(ckpt) == [1, 2]

    new.wait_for("every file read, then the batch without data", lambda _: drained(ckpt, files), timeout=WAIT)
    new.terminate()
    assert new.wait(300) == ExitCode.STOPPED_BY_REQUEST, new.log_tail()
    got = outputs.file_sink_rows(out)
    expected = events.tumbling(events.recorded_plan(ckpt))
    assert got == expected, {"duplicated": sorted((got - expected).items()), "missing": sorted((expected - got).items())}
