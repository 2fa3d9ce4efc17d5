"""A first deploy on a Kafka backlog with the exactly-once sink (issue 26): no batch too big, no crash loop.

A pass-through job (Kafka -> `SELECT key, value` -> Kafka, `startingOffsets: earliest`, no
maxOffsetsPerTrigger) over a backlog of numbered records. Before the batch cap, batch 0 held the whole
backlog in one transaction produced by the driver: past the transaction timeout the broker aborted it
(or the driver ran out of heap holding a partition), and every restart replayed the same planned batch.
Here a short transactionTimeoutMs and a small driver heap stand in for a backlog many times larger, so
the default run reproduces it in bounded time; the `slow` case is the issue's 5 M records with every
setting at its default. The output is read back as a read_committed consumer and every key counted:
0 missing, 0 duplicated.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pause_points import PausePoint
from runtime_kafka import start_run

from job_runtime.kafka import budget
from job_runtime.query.progress import read_batch_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import count_backlog, produce_backlog  # noqa: E402

SHORT_TIMEOUT_MS = 5_000  # the batch cap is then 50,000 records
BACKLOG_TIMEOUT_MS = 10_000  # 100,000 records: room for a loaded machine, still 5 times under the backlog
SMALL_DRIVER = ("--conf", "spark.driver.memory=512m")
BEFORE_COMMIT = PausePoint("kafka-before-commit:1", "batch 0's transaction sent, not committed")


def passthrough_job(broker: Any, source: str, target: str, path: Path, **sink: Any) -> Path:
    job = {"pipeline": {
        "sources": [{"name": "events", "kind": "kafka", "options": {
            "kafka.bootstrap.servers": broker.bootstrap, "subscribe": source, "startingOffsets": "earliest"}}],
        "transforms": [{"name": "out", "sql": "SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS v FROM events"}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": broker.bootstrap, "topic": target, "keyColumn": "id",
                                            "valueColumn": "v", **sink}},
    }}
    path.write_text(json.dumps(job))
    return path


def batch_sizes(checkpoint: Path) -> list[int]:
    """Records each planned batch read, from the checkpoint's offset log."""
    entries = sorted((int(p.name), p.read_text()) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    initial = [(checkpoint / "sources" / "0" / "0").read_text()]
    sizes, previous = [], None
    for _, text in entries:
        planned = budget.planned_records(text, previous, initial)
        assert planned is not None, text
        sizes.append(planned)
        previous = text
    return sizes


def topics(broker: Any, partitions: int) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:6]
    return broker.create_topic(f"backlog-{suffix}", partitions=partitions), broker.create_topic(f"copy-{suffix}")


@pytest.mark.parametrize("producers", ["driver", "executors"])
def test_a_first_deploy_on_a_backlog_publishes_every_record_once_without_a_crash_loop(
        kafka_broker, processes, tmp_path: Path, producers: str) -> None:
    records = 500_000  # 5 times the driver's cap of a 10 s transaction, 2.5 times the executors'
    source, target = topics(kafka_broker, partitions=1)
    produce_backlog(kafka_broker.bootstrap, source, records)
    job = passthrough_job(kafka_broker, source, target, tmp_path / "job.json", transactionTimeoutMs=BACKLOG_TIMEOUT_MS,
                          producers=producers)
    ckpt = tmp_path / "ckpt"

    # as a restart policy would: start again on the same checkpoint after a failure, up to three times
    codes, run = [], None
    for attempt in range(3):
        run = start_run(processes, tmp_path, job, ckpt, name="backlog", label=f"attempt-{attempt}", extra=SMALL_DRIVER)
        codes.append(run.wait(300))
        if codes[-1] == 0:
            break
    assert run is not None
    assert codes == [0], f"exit codes {codes} (a crash loop replays the planned batch)\n{run.log_tail()}"

    sizes = batch_sizes(ckpt)
    cap = budget.batch_cap(BACKLOG_TIMEOUT_MS, executors=producers == "executors")
    assert sum(sizes) == records and max(sizes) <= cap and len(sizes) >= records // cap, (cap, sizes)
    # the run to its end logged each batch's rows (and where its time went) as the checkpoint planned them
    logged = [batch["rows"] for line in run.log_text().splitlines() if (batch := read_batch_line(line)) is not None]
    assert [n for n in logged if n] == [n for n in sizes if n], (logged, sizes)
    # missing, duplicated, foreign, out of order: the driver's batches of 100,000 records are read as Spark
    # partitions of at most 75,000 (consecutive ranges of the one source partition); the output keeps the
    # source's order, as the executors' one task a batch does
    assert count_backlog(kafka_broker.bootstrap, target, records, order=True) == (0, 0, 0, 0)
    if producers == "driver":
        assert "maxRecordsPerPartition=75000 own=unset" in run.log_text(), run.log_tail()


def test_a_planned_batch_over_the_cap_is_planned_again_not_replayed(kafka_broker, processes, tmp_path: Path) -> None:
    records = 60_000
    source, target = topics(kafka_broker, partitions=2)
    produce_backlog(kafka_broker.bootstrap, source, records)
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"

    # 1. planned under the default budget (600,000 records: the whole backlog in batch 0), killed with its
    # transaction sent and not committed: planned, never published
    default = passthrough_job(kafka_broker, source, target, tmp_path / "default.json")
    first = start_run(processes, tmp_path, default, ckpt, name="replan", label="planned", point=BEFORE_COMMIT)
    first.wait_paused(pauses)
    first.kill()
    assert (ckpt / "offsets" / "0").exists() and not (ckpt / "commits" / "0").exists()
    assert batch_sizes(ckpt) == [records]

    # 2. a shorter transaction timeout makes that batch too big: the restart plans it again under the new cap
    # (as lowering maxOffsetsPerTrigger would), rather than replaying it
    short = passthrough_job(kafka_broker, source, target, tmp_path / "short.json", transactionTimeoutMs=SHORT_TIMEOUT_MS)
    second = start_run(processes, tmp_path, short, ckpt, name="replan", label="replanned")
    assert second.wait(400) == 0, second.log_tail()
    assert f"re-planned batch batchId=0 records={records}" in second.log_text(), second.log_tail()
    sizes = batch_sizes(ckpt)
    assert sum(sizes) == records and max(sizes) <= budget.batch_cap(SHORT_TIMEOUT_MS), sizes
    assert count_backlog(kafka_broker.bootstrap, target, records) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("producers", ["driver", "executors"])
def test_a_first_deploy_on_five_million_records_with_the_defaults(kafka_broker, processes, tmp_path: Path, producers: str) -> None:
    records = 5_000_000  # issue 26: batch 0 ran out of heap in the driver, on every restart
    source, target = topics(kafka_broker, partitions=2)
    produce_backlog(kafka_broker.bootstrap, source, records)
    job = passthrough_job(kafka_broker, source, target, tmp_path / "job.json", producers=producers)
    ckpt = tmp_path / "ckpt"
    run = start_run(processes, tmp_path, job, ckpt, name="backlog-5m", label="defaults")
    assert run.wait(1800) == 0, run.log_tail()
    sizes = batch_sizes(ckpt)
    assert sum(sizes) == records and max(sizes) <= budget.batch_cap(60_000, executors=producers == "executors"), sizes
    assert count_backlog(kafka_broker.bootstrap, target, records, timeout=900) == (0, 0, 0)
