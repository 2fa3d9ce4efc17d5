"""A task whose partition cannot be published in one transaction sends it in chunks (issue 26).

Executors producing (`local-cluster`), a pass-through job whose query is slow for every record
(a filter that sums a sequence of 8,000 numbers, always true) and hands the task its rows 100
at a time, `transactionTimeoutMs: 2000`. Computing the partition takes many seconds, and the task's
one transaction is open while it does: the broker would abort it, and every retry and restart of
the batch would run as long (before chunks: a crash loop). The task's first attempt gives its
one transaction up at half the timeout and fails; its retry computes the partition with no
transaction open and sends it in chunks, each committing a partial task marker.

The run is killed once the first chunk committed (a partial marker, some records visible); the
re-run checks what the partial marker covers, sends the rest, and the stream finishes. Read back
as a read_committed consumer: every record once.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from pause_points import PausePoint
from runtime_kafka import EXECUTORS, start_run
from test_runtime_kafka_executors import task_markers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import count_backlog, produce_backlog  # noqa: E402

RECORDS = 10_000  # under the executors' batch cap of a 2 s transaction (40,000): one batch, one task
TIMEOUT_MS = 2_000
SLOW = "aggregate(sequence(1, 8000), 0L, (acc, x) -> acc + x) > 0"  # about 1 ms a record on 2 cores
SMALL_ARROW_BATCHES = ("--conf", "spark.sql.execution.arrow.maxRecordsPerBatch=100")
CHUNK_COMMITTED = PausePoint("kafka-task-after-commit:1", "the task committed the first chunk of its partition")
NAME = "kafka-chunks"


def slow_job(broker: Any, source: str, target: str, path: Path) -> Path:
    path.write_text(json.dumps({"pipeline": {
        "sources": [{"name": "events", "kind": "kafka", "options": {
            "kafka.bootstrap.servers": broker.bootstrap, "subscribe": source, "startingOffsets": "earliest"}}],
        "transforms": [{"name": "out", "sql": f"SELECT CAST(key AS STRING) AS id, CAST(value AS STRING) AS v FROM events WHERE {SLOW}"}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": broker.bootstrap, "topic": target, "keyColumn": "id",
                                            "valueColumn": "v", "producers": "executors", "transactionTimeoutMs": TIMEOUT_MS}},
    }}))
    return path


def chunked_counts(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"committed batch batchId=\d+ .* chunked=(\d+)", log)]


def test_a_partition_too_slow_for_one_transaction_goes_in_chunks_and_a_kill_between_them_resumes_once(
        kafka_broker, processes, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:6]
    source = kafka_broker.create_topic(f"slow-{suffix}", partitions=1)
    target = kafka_broker.create_topic(f"copy-{suffix}", partitions=2)
    produce_backlog(kafka_broker.bootstrap, source, RECORDS)
    job = slow_job(kafka_broker, source, target, tmp_path / "job.json")
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"

    first = start_run(processes, tmp_path, job, ckpt, name=NAME, label="first-chunk", point=CHUNK_COMMITTED,
                      extra=SMALL_ARROW_BATCHES, master=EXECUTORS)
    first.wait_paused(pauses)
    first.kill()
    (offset, metadata), = task_markers(kafka_broker.bootstrap, f"streamjob-sink.tests.{NAME}", f"streamjob-markers.tests.{NAME}", 1)
    marker = json.loads(metadata)
    assert offset == 1 and marker["batch"] == 0 and 0 < marker["upto"] < 1 << 16 and 0 < marker["n"] < RECORDS, marker
    missing, duplicated, foreign = count_backlog(kafka_broker.bootstrap, target, RECORDS, timeout=30)
    assert (duplicated, foreign) == (0, 0) and missing == RECORDS - marker["n"], (missing, duplicated, foreign, marker)

    last = start_run(processes, tmp_path, job, ckpt, name=NAME, label="resume", extra=SMALL_ARROW_BATCHES, master=EXECUTORS)
    assert last.wait(400) == 0, last.log_tail()
    assert count_backlog(kafka_broker.bootstrap, target, RECORDS, timeout=60) == (0, 0, 0)
    assert chunked_counts(last.log_text())[:1] == [1], last.log_tail()  # batch 0's one task: resumed in chunks
    assert "re-run of a batch some tasks published: their records match batchId=0" in last.log_text(), last.log_tail()
