"""SIGKILLs of a Kafka -> Kafka job's driver and executors at seeded instants, then every window
exactly once for a read_committed consumer.

The job is examples/jobs/kafka_windows.yaml (runtime_kafka). Before each kill a further slice of
the time-ordered input is produced, so every run has batches to do. A driver kill takes the run's
process group (the Python driver, its JVM and executors, as a pod kill) and the next run restarts
from the checkpoint, at an instant drawn from a seeded generator (STREAMJOB_KAFKA_CHAOS_SEED):

- a random delay (0 to 1.5 s) after the run's next batch committed: wherever the next batch
  is (planning, the stateful operator, the producer's transaction, Spark's commit log);
- the Kafka sink's own instants: its n-th transaction sent but not committed, or committed to
  Kafka and not yet to Spark's commit log (job_runtime.testhooks);
- a random delay after the process started (during start-up, the restore of the checkpoint, the
  first batch).

An executor kill (master runtime_kafka.EXECUTORS, `local-cluster`: executors are JVM processes of
their own) takes one executor JVM: one Spark's task scheduler reports running tasks on, a drawn
delay into a batch with new data, or one drawn between batches. The run carries on: Spark
reschedules the lost tasks, the worker starts a new executor.

The stream is finished by the run alive at the end (it catches up, then SIGTERM) or by a last
available-now run. The consumed output is compared with runtime_kafka.reference_windows, computed
without Spark: 0 missing, 0 duplicated. The default run does bounded subsets (3 driver kills on
`local[2]`, 3 executor kills; fixed seeds); `-m slow` mixes driver and executor kills, 50 by
default, with the driver producing or, STREAMJOB_KAFKA_CHAOS_PRODUCERS=executors, the tasks, and
writes its result to the file STREAMJOB_KAFKA_CHAOS_REPORT names (docs/benchmarks/kafka-chaos.md,
kafka-chaos-executors.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pause_points import PausePoint
from runtime_harness import RuntimeProcess
from runtime_kafka import EXECUTORS, committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics

from streamjob_contract import checkpoint
from streamjob_contract.exitcodes import ExitCode

KILLS_DEFAULT = 3
KILLS_SLOW = 50
SLICE = 60  # events produced before each run (one batch is maxOffsetsPerTrigger=100)
TRIGGER = "500 milliseconds"
WAIT = 240.0  # for a batch commit or a pause point; an instant that never comes is a failure
CHUNK = 20  # events produced for one more batch when a mid-batch executor kill missed the tasks of the last one
MID_BATCH_POLL = 30.0  # seconds to see a batch's tasks on an executor before more input makes another batch
MID_BATCH_TRIES = 8


DRIVER = "driver"
EXECUTOR_MID_BATCH = "executor while a batch runs"
EXECUTOR_BETWEEN = "executor between batches"
BETWEEN_MESSAGES = ("Waiting for next trigger", "Waiting for data to arrive")
PAUSE_POINTS = ["kafka-before-commit", "kafka-after-commit"]  # the batch's commit (the driver's transaction)
TASK_PAUSE_POINTS = ["kafka-task-before-commit", "kafka-task-after-commit"]  # a task's, on an executor


def kill_chain(broker: Any, processes: list[RuntimeProcess], tmp_path: Path, kills: int, seed: int, *,
               master: str = "local[2]", kinds: list[str] | None = None, executor_share: float = 0.0,
               producers: str = "driver") -> dict[str, Any]:
    """`kills` kills and a final run; the result as a report dict (asserted by the caller).

    Each kill is of the kind `kinds` names (DRIVER, EXECUTOR_MID_BATCH, EXECUTOR_BETWEEN), or
    drawn: an executor kill with probability `executor_share` (`master` EXECUTORS), else the
    driver. An executor kill leaves the run going (Spark reschedules the lost tasks, the worker
    starts a new executor); a driver kill ends the run and the next starts from the checkpoint.
    `producers` is the sink's sink.kafka.producers; with "executors" a driver kill may also come
    while a task's transaction is sent or just committed (a task pauses, the run is killed).
    """
    began = time.monotonic()
    rng = random.Random(seed)
    gen = load_events_module()
    source, target = topics(broker)
    events = gen.generate(SLICE * (kills + 1))
    job = kafka_job(broker, source, target, tmp_path / "job.json", producers=producers)
    points = PAUSE_POINTS + (TASK_PAUSE_POINTS if producers == "executors" else [])
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"
    instants: list[dict[str, Any]] = []
    live: RuntimeProcess | None = None  # a run that outlived an executor kill
    restarts = 0

    def run(label: str, trigger: str, point: PausePoint | None = None) -> RuntimeProcess:
        return start_run(processes, tmp_path, job, ckpt, name="kafka-chaos", label=label, point=point, trigger=trigger,
                         master=master)

    def latest() -> int:
        found = checkpoint.latest_completed_batch(ckpt.as_uri())
        return -1 if found is None else found

    sent = 0  # events are produced in order (event time), never twice: the reference counts each once

    def produce_upto(end: int) -> None:
        nonlocal sent
        if end > sent:
            gen.produce(broker.bootstrap, source, events[sent:end])
            sent = end

    def more() -> bool:
        """A few more events, taken from the next slice, for another batch; False when the input is spent."""
        if sent >= len(events):
            return False
        produce_upto(min(sent + CHUNK, len(events)))
        return True

    for n in range(kills):
        produce_upto((n + 1) * SLICE)
        label, started = f"kill-{n + 1:02d}", time.monotonic()
        if kinds:
            kind = kinds[n]
        elif executor_share and rng.random() < executor_share:
            kind = EXECUTOR_MID_BATCH if rng.random() < 0.5 else EXECUTOR_BETWEEN
        else:
            kind = DRIVER
        if live is not None and live.exited():
            restarts += 1  # the query failed after an executor kill: restarted, as the operator would
            live = None
        if kind == DRIVER:
            instant = kill_driver(live, run, label, rng, latest, pauses, points)
            live = None
        else:
            live = live or run(label, TRIGGER)
            instant = kill_executor(live, kind, rng, latest, more)
        instants.append({"kill": n + 1, "kind": kind, "instant": instant, "latestCommit": latest(),
                         "secondsAfterStart": round(time.monotonic() - started, 1)})

    produce_upto(len(events))
    expected = reference_windows(events)
    if live is not None and live.proc is not None and live.proc.poll() is None:
        # the run that survived its executors' kills finishes the input itself, then stops cleanly
        committed_windows(broker.bootstrap, target, sum(expected.values()), timeout=WAIT)
        live.terminate()
        assert live.wait(300) == ExitCode.STOPPED_BY_REQUEST, live.log_tail()
    else:
        final = run("final", "available-now")
        assert final.wait(600) == ExitCode.FINISHED, final.log_tail()
    got = committed_windows(broker.bootstrap, target, sum(expected.values()))
    logs = "".join(p.log_text() for p in processes if p.log_path.exists())
    return {
        "seed": seed, "kills": len(instants), "events": len(events), "batches": latest() + 1, "master": master,
        "windowsExpected": sum(expected.values()), "windowsConsumed": sum(got.values()),
        "missing": sum((expected - got).values()), "duplicated": sum((got - expected).values()),
        "tasksLost": logs.count("ExecutorLostFailure"), "restartsAfterExecutorKills": restarts,
        "seconds": round(time.monotonic() - began), "instants": instants, "got": got, "expected": expected,
    }


def kill_driver(live: RuntimeProcess | None, run: Any, label: str, rng: random.Random, latest: Any, pauses: Path,
                points: list[str]) -> str:
    """SIGKILL a driver with its process group (JVM and executors): the live run, after its next
    commit, or a new run at a drawn instant."""
    roll = 0.0 if live is not None else rng.random()
    if roll < 0.4:
        before = latest()
        proc = live or run(label, TRIGGER)
        proc.wait_for("a new batch committed", lambda s: (s["latestCompletedBatch"] or -1) > before, timeout=WAIT)
        delay = rng.uniform(0.0, 1.5)
        time.sleep(delay)
        instant = f"{delay:.2f}s after batch {before + 1} committed"
    elif roll < 0.7:
        spec = f"{rng.choice(points)}:{rng.randint(1, 2)}"
        proc = run(label, TRIGGER, PausePoint(spec, spec))
        proc.wait_paused(pauses, timeout=WAIT)
        instant = f"paused at {spec}"
    else:
        delay = rng.uniform(2.0, 25.0)
        proc = run(label, TRIGGER)
        time.sleep(delay)
        if proc.exited():
            raise AssertionError(f"{label} exited {proc.proc.returncode}:\n{proc.log_tail()}")
        instant = f"{delay:.1f}s after the process started"
    proc.kill()
    return instant


def kill_executor(proc: RuntimeProcess, kind: str, rng: random.Random, latest: Any, more: Any) -> str:
    """SIGKILL one executor JVM of `proc`: one seen running tasks of a batch, or one drawn between
    batches (after a commit, the query's thread waiting for its next trigger).

    Tasks run for a moment only: when a batch ends before the poll of /status sees its tasks (a
    fast machine), more input (`more`) makes another batch and the poll tries again, so the test
    never depends on catching a transient state on the first try."""
    executors = wait_executors(proc)
    before = latest()
    if kind == EXECUTOR_MID_BATCH:
        running: dict[str, int] = {}
        for _ in range(MID_BATCH_TRIES):
            try:
                running = proc.wait_for("tasks running on an executor",
                                        lambda s: bool(set(s["runningTasks"] or {}) & set(executors)),
                                        timeout=MID_BATCH_POLL)["runningTasks"]
                break
            except AssertionError:
                if proc.exited():
                    raise
                assert more(), f"{proc.label}: no batch seen running tasks on an executor before the input ran out"
                executors = wait_executors(proc)
        assert running, f"{proc.label}: no batch seen running tasks on an executor in {MID_BATCH_TRIES} tries"
        victim = rng.choice(sorted(set(running) & set(executors)))
        where = f"while a batch after batch {before} ran, {running[victim]} task(s) running on it"
    else:
        # a steady state, not a moment: the slice's batch committed (whenever) and the query waits for more
        proc.wait_for("a committed batch, then the wait for the next trigger",
                      lambda s: (s["latestCompletedBatch"] or -1) >= 0 and s["statusMessage"] in BETWEEN_MESSAGES
                      and not s["runningTasks"], timeout=WAIT)
        victim = rng.choice(sorted(executors))
        where = f"between batches, after batch {latest()}"
    os.kill(executors[victim], signal.SIGKILL)
    return f"{where} (executor id {victim}, one of {len(executors)} alive)"


def wait_executors(proc: RuntimeProcess, count: int = 2) -> dict[str, int]:
    """The executor pids by id once `count` run (a killed one is replaced by its worker)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if proc.exited():
            raise AssertionError(f"{proc.label} exited {proc.proc.returncode}:\n{proc.log_tail()}")
        found = proc.executor_pids()
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{proc.label}: fewer than {count} executors within {WAIT}s: {proc.executor_pids()}")


def check(result: dict[str, Any]) -> None:
    got: Counter[Any] = result.pop("got")
    expected: Counter[Any] = result.pop("expected")
    print(f"\nkafka chaos: kills={result['kills']} windows={result['windowsExpected']} missing={result['missing']} "
          f"duplicated={result['duplicated']} tasksLost={result['tasksLost']} seconds={result['seconds']}")
    assert (result["missing"], result["duplicated"]) == (0, 0), result
    assert got == expected


def test_a_few_sigkills_at_seeded_instants_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    check(kill_chain(kafka_broker, processes, tmp_path, KILLS_DEFAULT, seed=20261123))


def test_executor_sigkills_during_and_between_batches_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    """Executor JVMs killed alone (a `local-cluster` master): Spark reschedules the lost tasks and
    the same run carries on; Kafka output exactly once."""
    kinds = [EXECUTOR_MID_BATCH, EXECUTOR_BETWEEN, EXECUTOR_MID_BATCH]
    result = kill_chain(kafka_broker, processes, tmp_path, len(kinds), seed=20261124, master=EXECUTORS, kinds=kinds)
    check(result)
    assert result["restartsAfterExecutorKills"] == 0, result  # an executor loss is not a job failure


@pytest.mark.slow
@pytest.mark.timeout(7200)  # 50 kills take 40 min or more on 2 shared cores: past the 900 s default of pyproject.toml
def test_fifty_sigkills_at_random_instants_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    seed = int(os.environ.get("STREAMJOB_KAFKA_CHAOS_SEED", "8"))
    kills = int(os.environ.get("STREAMJOB_KAFKA_CHAOS_KILLS", str(KILLS_SLOW)))
    producers = os.environ.get("STREAMJOB_KAFKA_CHAOS_PRODUCERS", "driver")
    assert producers in ("driver", "executors"), f"STREAMJOB_KAFKA_CHAOS_PRODUCERS={producers!r}: driver or executors"
    result = kill_chain(kafka_broker, processes, tmp_path, kills, seed, master=EXECUTORS, executor_share=0.5,
                        producers=producers)
    report = os.environ.get("STREAMJOB_KAFKA_CHAOS_REPORT")
    ok = (result["missing"], result["duplicated"]) == (0, 0)
    (tmp_path / "chaos.json").write_text(json.dumps({k: v for k, v in result.items() if k not in ("got", "expected")}, indent=1))
    if report:
        write_report(report, result, ok, kills, producers)
    check(result)


def write_report(report: str, result: dict[str, Any], ok: bool, asked: int, producers: str) -> None:
    """The report, to the file STREAMJOB_KAFKA_CHAOS_REPORT named; its command names that file as given."""
    path = Path(report)
    command = (f"STREAMJOB_KAFKA_CHAOS_KILLS={asked} STREAMJOB_KAFKA_CHAOS_SEED={result['seed']} "
               f"STREAMJOB_KAFKA_CHAOS_PRODUCERS={producers} STREAMJOB_KAFKA_CHAOS_REPORT={report} "
               "pytest -q -p no:cacheprovider -m slow tests/runtime/test_runtime_kafka_chaos.py -k fifty")
    kinds = Counter(i["kind"] if i["kind"] != DRIVER else
                    ("driver " + ("paused at a Kafka commit point" if i["instant"].startswith("paused") else
                                  "after a commit" if "committed" in i["instant"] else "after start"))
                    for i in result["instants"])
    lines = [
        "# Kafka chaos run: SIGKILLs of a Kafka -> Kafka job's driver and executors, then exactly once",
        "",
        "Written by `tests/runtime/test_runtime_kafka_chaos.py` (the `slow` test); the job is",
        "examples/jobs/kafka_windows.yaml on the test bed's broker, run on Spark's",
        f"`{result['master']}` master (each executor a JVM process of its own). A driver kill",
        "takes the driver's process group (driver, its JVM and executors: a pod kill) and the next run",
        "restarts from the checkpoint; an executor kill takes one executor JVM, while it runs tasks of a",
        "batch or between batches, and the run carries on (Spark reschedules, the worker starts a new",
        "executor). The output is read by a read_committed consumer and compared with a reference",
        "computed without Spark.",
        "",
        "| | |", "| --- | --- |",
        f"| result | {'PASS' if ok else 'FAIL'} |",
        f"| kills done | {result['kills']} (asked {asked}; the slow test's default is {KILLS_SLOW}) |",
        f"| who produces | `sink.kafka.producers: {producers}`"
        + (" (each task a transaction of its own; a driver kill may also come at a task's commit point)" if producers == "executors" else "")
        + " |",
        f"| kill kinds | {', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))} |",
        f"| tasks lost with a killed executor | {result['tasksLost']} (Spark's `ExecutorLostFailure` in the driver logs) |",
        f"| restarts after an executor kill | {result['restartsAfterExecutorKills']} |",
        f"| events / batches | {result['events']} / {result['batches']} |",
        f"| windows compared | {result['windowsExpected']} expected, {result['windowsConsumed']} consumed |",
        f"| missing | {result['missing']} |",
        f"| duplicated | {result['duplicated']} |",
        f"| wall time | {result['seconds']} s |",
        f"| seed | {result['seed']} |",
        f"| machine | 2 shared cores, Python {sys.version.split()[0]} |",
        "",
        "Command:", "", "```", command, "```", "",
        "Kills (kind, instant, latest committed batch at the kill):", "",
    ]
    lines += [f"{i['kill']}. {i['kind']}: {i['instant']} (batch {i['latestCommit']})" for i in result["instants"]]
    path.write_text("\n".join(lines) + "\n")
