"""Stop-with-savepoint under steady input stops between micro-batches (job_runtime.query.drain), so the
savepoint has no planned batch and a change of statePartitions restores from it.

Before: query.stop() interrupted the batch in flight, the savepoint held it planned, and the
repartition was refused ("batch K was planned but never committed"). Here a producer thread keeps
the Kafka source busy (every trigger has new data) while the stop is asked for; the restore asks
for 3 state partitions instead of 2 and finishes the input; a read_committed consumer then sees
every window of examples/jobs/kafka_windows.yaml exactly once (runtime_kafka's reference).

In the `slow` run (two runtime processes, about 2 to 3 minutes here); the default run checks the
drain against Spark itself under steady file input (tests/savepoints/test_drain.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtime_harness import RuntimeProcess, run_args
from runtime_kafka import committed_windows, kafka_job, load_events_module, reference_windows, topics

from streamjob_contract.exitcodes import ExitCode
from job_runtime.savepoints import inspect_savepoint

EVENTS = 900
CHUNK = 15  # events per produce call, every 0.2 s: more than a 500 ms trigger's worth keeps coming


@pytest.mark.slow
def test_stop_with_savepoint_under_steady_input_ends_between_batches_then_repartitions(
    kafka_broker, processes, tmp_path: Path
) -> None:
    gen = load_events_module()
    source, target = topics(kafka_broker)
    events = gen.generate(EVENTS)
    job = kafka_job(kafka_broker, source, target, tmp_path / "job.json")
    produced = 0
    stop_producing = threading.Event()

    def steady() -> None:
        nonlocal produced
        while produced < len(events) and not stop_producing.wait(0.2):
            gen.produce(kafka_broker.bootstrap, source, events[produced:produced + CHUNK])
            produced += CHUNK

    first = RuntimeProcess(
        tmp_path / "first",
        run_args(job, (tmp_path / "ckpt1").as_uri(), name="kafka-drain", trigger="500 milliseconds",
                 extra=("--savepoint-location", (tmp_path / "savepoints").as_uri())),
        label="first",
    )
    processes.append(first.start())
    producer = threading.Thread(target=steady, daemon=True)
    producer.start()
    try:
        first.wait_for("batch 2 committed", lambda s: (s["latestCompletedBatch"] or -1) >= 2)
        assert produced < len(events), "the input ran out before the stop: not steady input"
        savepoint_path = first.stop_with_savepoint()
    finally:
        stop_producing.set()
        producer.join(30)
    log = first.log_text()
    assert "ended query between batches" in log, first.log_tail()
    manifest = inspect_savepoint(savepoint_path)
    assert manifest.planned_batch_id is None, manifest  # the batch in flight committed, none started after

    gen.produce(kafka_broker.bootstrap, source, events[produced:])
    second = RuntimeProcess(
        tmp_path / "second",
        run_args(job, (tmp_path / "ckpt2").as_uri(), name="kafka-drain", partitions=3,
                 extra=("--restore-from", savepoint_path)),
        label="second",
    )
    processes.append(second.start())
    assert second.wait(600) == ExitCode.FINISHED, second.log_tail()
    assert "restored savepoint" in second.log_text()
    expected = reference_windows(events)
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected
