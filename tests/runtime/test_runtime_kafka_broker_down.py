"""Kafka broker down, at the start and in the middle of a run: the job fails naming the broker and
the topic, exits non-zero; a savepoint asked for while the broker is down completes or fails
without a hang; once the broker is back, a restart from the checkpoint publishes every window
exactly once (a read_committed consumer against runtime_kafka.reference_windows).

The broker is really stopped (its process ends) and started again on the same port and log
directory (testbed.kafka.KafkaBroker.restart). It is this module's own broker, so the session's
shared one is never down for other tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import RuntimeProcess, run_args
from runtime_kafka import EVENTS, FAIL_FAST, committed_windows, kafka_job, load_events_module, reference_windows, topics

from streamjob_contract.exitcodes import ExitCode


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from testbed import locate
    from testbed.kafka import start_kafka

    broker = start_kafka(locate.kafka_dir(), tmp_path_factory.mktemp("kafka-down"), timeout=180)
    yield broker
    broker.stop()


def assert_names_kafka(proc: RuntimeProcess, broker: Any, *topics: str) -> str:
    """The failure names the broker and the job's topic it could not use (any of ``topics``)."""
    message = str(proc.termination().get("message", ""))
    assert broker.bootstrap in message and any(t in message for t in topics), message
    return message


def test_broker_down_at_start_and_mid_run_then_each_window_once(own_broker, processes, tmp_path: Path) -> None:
    gen = load_events_module()
    source, target = topics(own_broker)
    events = gen.generate(EVENTS)
    gen.produce(own_broker.bootstrap, source, events[:300])
    job = kafka_job(own_broker, source, target, tmp_path / "job.json", FAIL_FAST, transactionTimeoutMs=15000)
    ckpt = (tmp_path / "ckpt").as_uri()
    savepoints = ("--savepoint-location", (tmp_path / "savepoints").as_uri())

    def run(label: str, trigger: str) -> RuntimeProcess:
        proc = RuntimeProcess(tmp_path / "runs", run_args(job, ckpt, name="kafka-down", trigger=trigger, extra=savepoints), label=label)
        processes.append(proc.start())
        return proc

    # 1. down at the start: the job fails naming the broker and a topic; the sink's producer starts its
    # transactions (fencing an earlier driver) before the query plans, so it is the sink's topic that fails first
    own_broker.stop()
    at_start = run("down-at-start", "500 milliseconds")
    assert at_start.wait(400) == ExitCode.FAILED, at_start.log_tail()
    print("AT START:", assert_names_kafka(at_start, own_broker, source, target))

    # 2. down mid-run: a savepoint asked for then completes or fails, the job fails naming the broker
    own_broker.restart()
    mid_run = run("down-mid-run", "500 milliseconds")
    mid_run.wait_for("batch 1 committed", lambda s: (s["latestCompletedBatch"] or -1) >= 1)
    own_broker.stop()
    code, accepted = mid_run.request("POST", "/savepoints", {"stop": False})
    assert code == 202, accepted
    savepoint = mid_run.wait_for(
        "the savepoint's outcome", lambda s: (s["lastSavepoint"] or {}).get("state") in ("COMPLETED", "FAILED"),
    )["lastSavepoint"]
    print("SAVEPOINT:", savepoint)
    assert mid_run.wait(400) == ExitCode.FAILED, mid_run.log_tail()
    print("MID RUN:", assert_names_kafka(mid_run, own_broker, source, target))

    # 3. the broker is back: the restart from the checkpoint finishes the stream, each window once
    own_broker.restart()
    gen.produce(own_broker.bootstrap, source, events[300:])
    last = run("back", "available-now")
    assert last.wait(400) == ExitCode.FINISHED, last.log_tail()
    expected = reference_windows(events)
    assert committed_windows(own_broker.bootstrap, target, sum(expected.values())) == expected
