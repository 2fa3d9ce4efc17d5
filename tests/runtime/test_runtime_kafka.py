"""Kafka end to end through the runtime: a Kafka source and the exactly-once Kafka sink, through
SIGKILLs at both instants of the sink's two-phase commit, a savepoint carrying a batch published to
Kafka but not committed to Spark, and stop-with-savepoint + restore.

The job is examples/jobs/kafka_windows.yaml (Kafka -> 10-second windows -> Kafka). Its input is
strictly time-ordered, so the closed windows do not depend on how Spark cut the batches and the
reference is computed without Spark (runtime_kafka.reference_windows). The output is read back
as a read_committed consumer and compared as a multiset: a window published twice, or not at
all, fails.
"""

from __future__ import annotations

from pathlib import Path

import pyspark
from pause_points import PausePoint
from runtime_harness import RuntimeProcess, run_args
from runtime_kafka import EVENTS, committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics

from streamjob_contract.exitcodes import ExitCode
from job_runtime.savepoints import write_savepoint

AFTER_COMMIT = PausePoint("kafka-after-commit:2", "batch 1 committed to Kafka, not to Spark's commit log")
RERUN_THEN_AFTER_COMMIT = PausePoint("kafka-after-commit:1", "batch 1 skipped, batch 2 committed to Kafka, not to Spark")
BEFORE_COMMIT = PausePoint("kafka-before-commit:1", "the first transaction of the run sent, not committed")


def test_sigkill_around_the_kafka_commit_publishes_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    gen = load_events_module()
    source, target = topics(kafka_broker)
    events = gen.generate(EVENTS)
    gen.produce(kafka_broker.bootstrap, source, events)
    expected = reference_windows(events)
    job = kafka_job(kafka_broker, source, target, tmp_path / "job.json")
    ckpt, ckpt2, pauses = tmp_path / "ckpt", tmp_path / "ckpt2", tmp_path / "pauses"
    savepoint = tmp_path / "savepoint"

    def run(point: PausePoint | None, label: str, checkpoint: Path = ckpt, extra: tuple[str, ...] = ()) -> RuntimeProcess:
        return start_run(processes, tmp_path, job, checkpoint, name="kafka-kills", label=label, point=point, extra=extra)

    def published_once() -> None:
        seen = committed_windows(kafka_broker.bootstrap, target)
        assert seen and max(seen.values()) == 1 and not seen - expected, seen

    # 1. killed after batch 1's transaction committed, before Spark's commit log entry
    first = run(AFTER_COMMIT, "after-commit")
    first.wait_paused(pauses)
    first.kill()
    assert (ckpt / "offsets" / "1").exists() and not (ckpt / "commits" / "1").exists()
    # the windows reach the sink through the aggregation's shuffle: the source is read unsplit
    assert "kafka sources unsplit" in first.log_text(), first.log_tail()
    assert "kafka source source=events kafka.max.poll.records=10000 own=unset" in first.log_text(), first.log_tail()
    published_once()

    # 2. the restart re-runs batch 1 and recognises it as published; killed after batch 2's Kafka commit
    second = run(RERUN_THEN_AFTER_COMMIT, "rerun")
    second.wait_paused(pauses)
    second.kill()
    assert "skipped batch batchId=1 reason=already committed" in second.log_text(), second.log_tail()
    assert (ckpt / "offsets" / "2").exists() and not (ckpt / "commits" / "2").exists()
    published_once()

    # 3. a savepoint of that checkpoint carries batch 2, planned and published, not committed: the job
    # restored from it into a new checkpoint must recognise batch 2 too (the marker is per job, and
    # names the batch by its input), then is killed mid-transaction
    write_savepoint(ckpt.as_uri(), savepoint.as_uri(), job_name="kafka-kills", job_namespace="tests",
                    job_hash="", spark_version=pyspark.__version__)
    restore = ("--restore-from", savepoint.as_uri())
    third = run(BEFORE_COMMIT, "restored", ckpt2, restore)
    third.wait_paused(pauses)
    third.kill()
    assert "skipped batch batchId=2 reason=already committed" in third.log_text(), third.log_tail()
    published_once()

    # 4. the last run aborts the open transaction (fencing) and finishes the stream
    last = run(None, "finish", ckpt2, restore)
    assert last.wait(400) == 0, last.log_tail()
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected


def test_stop_with_savepoint_then_restore_resumes_the_kafka_offsets(kafka_broker, processes, tmp_path: Path) -> None:
    gen = load_events_module()
    source, target = topics(kafka_broker)
    events = gen.generate(EVENTS)
    gen.produce(kafka_broker.bootstrap, source, events[:400])
    job = kafka_job(kafka_broker, source, target, tmp_path / "job.json")
    first = RuntimeProcess(
        tmp_path / "first",
        run_args(job, (tmp_path / "ckpt1").as_uri(), name="kafka-savepoint", trigger="500 milliseconds",
                 extra=("--savepoint-location", (tmp_path / "savepoints").as_uri())),
        label="first",
    )
    processes.append(first.start())
    first.wait_for("batch 1 committed", lambda s: (s["latestCompletedBatch"] or -1) >= 1)
    code, accepted = first.request("POST", "/savepoints", {"stop": True})
    assert code == 202, accepted
    assert first.wait(300) == ExitCode.STOPPED_FOR_SAVEPOINT, first.log_tail()
    savepoint = first.termination()["savepoint"]
    assert savepoint["state"] == "COMPLETED", savepoint

    # more input while the job is down; startingOffsets=earliest must not matter on the restore
    gen.produce(kafka_broker.bootstrap, source, events[400:])
    ckpt2 = tmp_path / "ckpt2"
    second = RuntimeProcess(
        tmp_path / "second",
        run_args(job, ckpt2.as_uri(), name="kafka-savepoint", extra=("--restore-from", savepoint["path"])),
        label="second",
    )
    processes.append(second.start())
    assert second.wait(400) == 0, second.log_tail()
    assert "restored savepoint" in second.log_text()
    # the restored run went on from the savepoint's batch (its offsets), not from a fresh start
    new_batches = sorted(int(p.name) for p in (ckpt2 / "commits").iterdir() if p.name.isdigit())
    assert new_batches[0] <= savepoint["batchId"] < new_batches[-1], (savepoint, new_batches)
    expected = reference_windows(events)
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected
