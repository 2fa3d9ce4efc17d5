"""The exactly-once Kafka sink with executors producing (`sink.kafka.producers: executors`).

The job is examples/jobs/kafka_windows.yaml (runtime_kafka) with the executors as processes of
their own (`local-cluster`): each task of a batch publishes its partition in a transaction of its
own with its task marker, the driver then commits the batch marker. Kills at the instants this
adds (a task's transaction committed, every task committed and the batch marker not) and executor
kills mid-batch, then every window exactly once for a read_committed consumer.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from pause_points import PausePoint
from runtime_harness import RuntimeProcess
from runtime_kafka import EVENTS, EXECUTORS, committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics
from test_runtime_kafka_chaos import DRIVER, EXECUTOR_MID_BATCH, check, kill_chain

from streamjob_contract.exitcodes import ExitCode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
from kafka_io import count_backlog, produce_backlog  # noqa: E402

TASK_COMMITTED = PausePoint("kafka-task-after-commit:1", "a task of the first batch with rows committed its transaction")
RANDOM_RECORDS = 300
TASKS_COMMITTED = PausePoint("kafka-before-commit:1", "every task of the run's first batch published, its batch marker not")


def task_markers(bootstrap: str, group: str, topic: str, partitions: int) -> list[tuple[int, str]]:
    """The committed task markers (offset, metadata) right after a kill. read_uncommitted: another task of
    the killed run may have been between sending its marker and committing, and a read_committed fetch
    waits on that pending commit until the broker's transaction timeout (tests/kafka/test_kafka_broker.py);
    the runtime itself initialises the task's producer, which aborts it, before it reads a marker."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [(tp.offset, tp.metadata or "") for tp in found]
    finally:
        consumer.close()


def committed_lines(proc: RuntimeProcess) -> list[dict[str, int]]:
    """The driver's "committed batch" lines: batch id and task counts."""
    pattern = r"committed batch batchId=(\d+) records=(\d+) tasks=(\d+) published=(\d+) skipped=(\d+) empty=(\d+)"
    keys = ("batch", "records", "tasks", "published", "skipped", "empty")
    return [dict(zip(keys, map(int, m), strict=True)) for m in re.findall(pattern, proc.log_text())]


def test_executors_publish_each_partition_once_through_kills_at_the_task_and_batch_commits(kafka_broker, processes, tmp_path: Path) -> None:
    gen = load_events_module()
    source, target = topics(kafka_broker)
    events = gen.generate(EVENTS)
    gen.produce(kafka_broker.bootstrap, source, events)
    expected = reference_windows(events)
    job = kafka_job(kafka_broker, source, target, tmp_path / "job.json", producers="executors")
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"

    def run(point: PausePoint | None, label: str) -> RuntimeProcess:
        return start_run(processes, tmp_path, job, ckpt, name="kafka-tasks", label=label, point=point, master=EXECUTORS)

    def published_once() -> None:
        seen = committed_windows(kafka_broker.bootstrap, target)
        assert max(seen.values(), default=1) == 1 and not seen - expected, seen

    # 1. a task's transaction committed (its rows and its marker), the batch not: killed there
    first = run(TASK_COMMITTED, "task-committed")
    first.wait_paused(pauses)
    first.kill()
    published_once()
    markers = task_markers(kafka_broker.bootstrap, "streamjob-sink.tests.kafka-tasks", "streamjob-markers.tests.kafka-tasks", 2)
    done = [m for m in markers if m[0] >= 0]
    assert done and all('"rows":' in meta for _, meta in done), markers  # at least the paused task's marker

    # 2. the re-run skips what the task published and publishes the rest; killed when every task of
    # its first batch committed and its batch marker did not
    second = run(TASKS_COMMITTED, "tasks-committed")
    second.wait_paused(pauses)
    second.kill()
    published_once()

    # 3. the last run finds every task of that batch published (skipped), then finishes the stream
    last = run(None, "finish")
    assert last.wait(400) == 0, last.log_tail()
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected
    lines = committed_lines(last)
    assert lines and lines[0]["skipped"] >= 1 and lines[0]["published"] == 0, (lines, last.log_tail())
    assert all(line["tasks"] == 2 for line in lines), lines  # --state-partitions 2: the windows' two shuffle partitions


def test_executors_producing_through_driver_and_executor_kills_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    kinds = [DRIVER, EXECUTOR_MID_BATCH, DRIVER, EXECUTOR_MID_BATCH]
    result = kill_chain(kafka_broker, processes, tmp_path, len(kinds), seed=20261127, master=EXECUTORS, kinds=kinds,
                        producers="executors")
    check(result)


def test_a_re_run_that_gives_a_published_partition_other_records_is_refused_and_repeats_nothing(kafka_broker, processes, tmp_path: Path) -> None:
    """`uuid()` in the output: a restarted driver draws another seed, so the re-run of a batch gives its
    tasks other records. The batch is refused before any task sends, naming the partition a task had
    published, and no key is published twice."""
    suffix = uuid.uuid4().hex[:6]
    source, target = kafka_broker.create_topic(f"keys-{suffix}", partitions=2), kafka_broker.create_topic(f"copy-{suffix}", partitions=2)
    produce_backlog(kafka_broker.bootstrap, source, RANDOM_RECORDS)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"pipeline": {
        "sources": [{"name": "keys", "kind": "kafka", "options": {
            "kafka.bootstrap.servers": kafka_broker.bootstrap, "subscribe": source, "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "100"}}],
        "transforms": [{"name": "shuffled", "sql": "SELECT CAST(key AS STRING) AS id, uuid() AS sent FROM keys"}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topic": target, "keyColumn": "id",
                                            "valueColumn": "sent", "producers": "executors"}},
    }}))
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"
    first = start_run(processes, tmp_path, job, ckpt, name="kafka-rand", label="task-committed", point=TASK_COMMITTED, master=EXECUTORS)
    first.wait_paused(pauses)
    first.kill()
    second = start_run(processes, tmp_path, job, ckpt, name="kafka-rand", label="re-run", master=EXECUTORS)
    assert second.wait(400) == ExitCode.FAILED, second.log_tail()
    assert re.search(r"batch 0 partition \d not published again: the re-run holds other records.*nothing of this run was sent",
                     second.log_text()), second.log_tail()
    missing, duplicated, foreign = count_backlog(kafka_broker.bootstrap, target, RANDOM_RECORDS, timeout=30)
    assert duplicated == 0 and foreign == 0 and missing < RANDOM_RECORDS, (missing, duplicated, foreign)
