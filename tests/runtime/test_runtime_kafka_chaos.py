"""SIGKILLs of a Kafka -> Kafka job's driver at seeded random instants, each run restarted from
the checkpoint, then every window exactly once for a read_committed consumer.

The job is examples/jobs/kafka_windows.yaml (runtime_kafka). Before each run a further slice of
the time-ordered input is produced, so every run has batches to do. Each run is killed with its
process group (the Python driver and its JVM, as a pod kill) at an instant drawn from a seeded
generator (STREAMJOB_KAFKA_CHAOS_SEED to vary it):

- a random delay (0 to 1.5 s) after the run's first new batch committed: wherever the next batch
  is (planning, the stateful operator, the producer's transaction, Spark's commit log);
- the Kafka sink's own instants: its n-th transaction sent but not committed, or committed to
  Kafka and not yet to Spark's commit log (job_runtime.testhooks);
- a random delay after the process started (during start-up, the restore of the checkpoint, the
  first batch).

The last run finishes the stream (available-now). The consumed output is compared with
runtime_kafka.reference_windows, computed without Spark: 0 missing, 0 duplicated. The default run
does a bounded subset (KILLS_DEFAULT, fixed seed); `-m slow` does 50 and writes its result to
docs/benchmarks/kafka-chaos.md when STREAMJOB_KAFKA_CHAOS_REPORT names that file.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pause_points import PausePoint
from runtime_harness import RuntimeProcess
from runtime_kafka import committed_windows, kafka_job, load_events_module, reference_windows, start_run, topics

from job_runtime import checkpoint
from job_runtime.exitcodes import ExitCode

KILLS_DEFAULT = 3
KILLS_SLOW = 50
SLICE = 60  # events produced before each run (one batch is maxOffsetsPerTrigger=100)
TRIGGER = "500 milliseconds"
WAIT = 240.0  # for a batch commit or a pause point; an instant that never comes is a failure


def kill_chain(broker: Any, processes: list[RuntimeProcess], tmp_path: Path, kills: int, seed: int) -> dict[str, Any]:
    """`kills` killed runs and a final one; the result as a report dict (asserted by the caller)."""
    began = time.monotonic()
    rng = random.Random(seed)
    gen = load_events_module()
    source, target = topics(broker)
    events = gen.generate(SLICE * (kills + 1))
    job = kafka_job(broker, source, target, tmp_path / "job.json")
    ckpt, pauses = tmp_path / "ckpt", tmp_path / "pauses"
    instants: list[dict[str, Any]] = []

    def run(label: str, trigger: str, point: PausePoint | None = None) -> RuntimeProcess:
        return start_run(processes, tmp_path, job, ckpt, name="kafka-chaos", label=label, point=point, trigger=trigger)

    def latest() -> int:
        found = checkpoint.latest_completed_batch(ckpt.as_uri())
        return -1 if found is None else found

    for n in range(kills):
        gen.produce(broker.bootstrap, source, events[n * SLICE:(n + 1) * SLICE])
        label, roll, started = f"kill-{n + 1:02d}", rng.random(), time.monotonic()
        if roll < 0.4:
            before = latest()
            proc = run(label, TRIGGER)
            proc.wait_for("a new batch committed", lambda s: (s["latestCompletedBatch"] or -1) > before, timeout=WAIT)
            delay = rng.uniform(0.0, 1.5)
            time.sleep(delay)
            instant = f"{delay:.2f}s after batch {before + 1} committed"
        elif roll < 0.7:
            spec = f"kafka-{rng.choice(['before', 'after'])}-commit:{rng.randint(1, 2)}"
            proc = run(label, TRIGGER, PausePoint(spec, spec))
            proc.wait_paused(pauses, timeout=WAIT)
            instant = f"paused at {spec}"
        else:
            delay = rng.uniform(2.0, 25.0)
            proc = run(label, TRIGGER)
            time.sleep(delay)
            if proc.proc is not None and proc.proc.poll() is not None:
                raise AssertionError(f"{label} exited {proc.proc.returncode}:\n{proc.log_tail()}")
            instant = f"{delay:.1f}s after the process started"
        proc.kill()
        instants.append({"kill": n + 1, "instant": instant, "latestCommit": latest(),
                         "secondsAfterStart": round(time.monotonic() - started, 1)})

    gen.produce(broker.bootstrap, source, events[kills * SLICE:])
    final = run("final", "available-now")
    assert final.wait(600) == ExitCode.FINISHED, final.log_tail()
    expected = reference_windows(events)
    got = committed_windows(broker.bootstrap, target, sum(expected.values()))
    return {
        "seed": seed, "kills": len(instants), "events": len(events), "batches": latest() + 1,
        "windowsExpected": sum(expected.values()), "windowsConsumed": sum(got.values()),
        "missing": sum((expected - got).values()), "duplicated": sum((got - expected).values()),
        "seconds": round(time.monotonic() - began), "instants": instants, "got": got, "expected": expected,
    }


def check(result: dict[str, Any]) -> None:
    got: Counter[Any] = result.pop("got")
    expected: Counter[Any] = result.pop("expected")
    print(f"\nkafka chaos: kills={result['kills']} windows={result['windowsExpected']} missing={result['missing']} "
          f"duplicated={result['duplicated']} seconds={result['seconds']}")
    assert (result["missing"], result["duplicated"]) == (0, 0), result
    assert got == expected


def test_a_few_sigkills_at_seeded_instants_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    check(kill_chain(kafka_broker, processes, tmp_path, KILLS_DEFAULT, seed=20261123))


@pytest.mark.slow
def test_fifty_sigkills_at_random_instants_then_each_window_once(kafka_broker, processes, tmp_path: Path) -> None:
    seed = int(os.environ.get("STREAMJOB_KAFKA_CHAOS_SEED", "8"))
    kills = int(os.environ.get("STREAMJOB_KAFKA_CHAOS_KILLS", str(KILLS_SLOW)))
    result = kill_chain(kafka_broker, processes, tmp_path, kills, seed)
    report = os.environ.get("STREAMJOB_KAFKA_CHAOS_REPORT")
    ok = (result["missing"], result["duplicated"]) == (0, 0)
    (tmp_path / "chaos.json").write_text(json.dumps({k: v for k, v in result.items() if k not in ("got", "expected")}, indent=1))
    if report:
        write_report(Path(report), result, ok, kills)
    check(result)


def write_report(path: Path, result: dict[str, Any], ok: bool, asked: int) -> None:
    command = (f"STREAMJOB_KAFKA_CHAOS_KILLS={asked} STREAMJOB_KAFKA_CHAOS_SEED={result['seed']} "
               f"STREAMJOB_KAFKA_CHAOS_REPORT=docs/benchmarks/kafka-chaos.md "
               "pytest -q -p no:cacheprovider -m slow tests/runtime/test_runtime_kafka_chaos.py -k fifty")
    kinds = Counter(i["instant"].split(" ")[0] if i["instant"].startswith("paused") else
                    ("after a commit" if "committed" in i["instant"] else "after start") for i in result["instants"])
    lines = [
        "# Kafka chaos run: SIGKILLs of a Kafka -> Kafka job, then exactly once",
        "",
        "Written by `tests/runtime/test_runtime_kafka_chaos.py` (the `slow` test); the job is",
        "examples/jobs/kafka_windows.yaml on the test bed's broker, each run killed with its process",
        "group (driver and JVM) and restarted from the checkpoint; the output read by a",
        "read_committed consumer and compared with a reference computed without Spark.",
        "",
        "| | |", "| --- | --- |",
        f"| result | {'PASS' if ok else 'FAIL'} |",
        f"| kills done | {result['kills']} (asked {asked}; the slow test's default is {KILLS_SLOW}) |",
        f"| kill instants | {', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))} |",
        f"| events / batches | {result['events']} / {result['batches']} |",
        f"| windows compared | {result['windowsExpected']} expected, {result['windowsConsumed']} consumed |",
        f"| missing | {result['missing']} |",
        f"| duplicated | {result['duplicated']} |",
        f"| wall time | {result['seconds']} s |",
        f"| seed | {result['seed']} |",
        f"| machine | 2 shared cores, Python {sys.version.split()[0]} |",
        "",
        "Command:", "", "```", command, "```", "",
        "Kills (instant, latest committed batch at the kill):", "",
    ]
    lines += [f"{i['kill']}. {i['instant']} (batch {i['latestCommit']})" for i in result["instants"]]
    path.write_text("\n".join(lines) + "\n")
