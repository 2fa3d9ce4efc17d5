"""At least fifty SIGKILLs of one job's driver, at random and at named instants, then exactly-once (`-m slow`).

One job's life over 60 input files, each run a new runtime process killed with
its process group as a pod kill would. The instants, drawn from a seeded random
generator (STREAMJOB_KILL_SEED to vary it):

- the first seconds of the fresh job: first the named writes (query metadata,
  the first source-log entry, the first offset-log entry), then kills at random
  delays after the process started, while no batch has committed;
- a pause inside one of Spark's writes: the offset log, the commit log, a state
  store changelog, the source log, the file sink's log, each opened, half
  written, or just closed (tests/runtime/pause_points.py);
- a random delay (0 to 1.5 s) after the next batch committed;
- a running savepoint or a stop-with-savepoint, after 1 to 6 files were copied;
- every twelve kills a completed stop-with-savepoint, restored into a fresh
  checkpoint by a run killed after 1 to 8 files of the restore were copied.

The last run finishes the stream; the file sink's committed output must equal
the independently computed reference: 0 missing, 0 duplicated, 0 different.
The kills and the result are written to <tmp>/kills.json and printed.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
import runtime_outputs as outputs
import runtime_reference as reference
from pause_points import PausePoint, jvm_hook_args
from runtime_harness import RuntimeProcess, example_job, run_args, runtime_env
from runtime_inputs import SEED, Input, load_generator

from streamjob_contract.runtime_status import RunState

from streamjob_contract.exitcodes import ExitCode

FILES = 60
KILLS = 50
TRIGGER = "300 milliseconds"
PAUSE_TIMEOUT = 45.0  # an instant that no longer comes (the input is all read): kill anyway
TARGETS = {
    "offset log": r"/{ckpt}/offsets/\d+$",
    "commit log": r"/{ckpt}/commits/\d+$",
    "state changelog": r"/{ckpt}/state/0/\d+/\d+\.changelog$",
    "source log": r"/{ckpt}/sources/0/\d+(\.compact)?$",
    "sink log": r"/out/_spark_metadata/\d+(\.compact)?$",
}
PHASES = {"open": "opened", "write": "half written", "close": "just closed"}


class Chain:
    """The job's current checkpoint and the runs made on it."""

    def __init__(self, tmp_path: Path, job: Path, pause_jar: Path, processes: list[RuntimeProcess]) -> None:
        self.tmp_path, self.job, self.jar, self.processes = tmp_path, job, pause_jar, processes
        self.index = 0
        self.ckpt = tmp_path / "ckpt0"
        self.restore_from: str | None = None
        self.kills: list[dict[str, Any]] = []

    def args(self, trigger: str = TRIGGER) -> list[str]:
        extra: tuple[str, ...] = (
            "--owner-uid", "uid-random-kills", "--savepoint-location", self.tmp_path.as_uri(), *jvm_hook_args(self.jar)
        )
        if self.restore_from:
            extra += ("--restore-from", self.restore_from)
        return run_args(self.job, self.ckpt.as_uri(), trigger=trigger, extra=extra)

    def start(self, point: PausePoint | None = None, trigger: str = TRIGGER) -> RuntimeProcess:
        env = runtime_env(point.env(self.tmp_path / "pause")) if point else runtime_env()
        proc = RuntimeProcess(self.tmp_path / "runs", self.args(trigger), env=env, label=f"run-{len(self.processes):03d}")
        self.processes.append(proc.start())
        return proc

    def latest(self) -> int:
        commits = self.ckpt / "commits"
        found = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
        return max(found, default=-1)

    def kill(self, proc: RuntimeProcess, kind: str, instant: str, started: float) -> None:
        proc.kill()
        self.kills.append({
            "kill": len(self.kills) + 1, "kind": kind, "instant": instant, "checkpoint": self.ckpt.name,
            "latestCommit": self.latest(), "secondsAfterStart": round(time.monotonic() - started, 1),
        })

    def paused_kill(self, point: PausePoint, kind: str) -> None:
        started = time.monotonic()
        proc = self.start(point)
        self.wait_paused_or_kill(proc, point, kind, started)

    def wait_paused_or_kill(self, proc: RuntimeProcess, point: PausePoint, kind: str, started: float) -> None:
        try:
            where = proc.wait_paused(self.tmp_path / "pause", timeout=PAUSE_TIMEOUT)
            self.kill(proc, kind, f"{point.what} ({'/'.join(where.rsplit('/', 2)[-2:])})", started)
        except AssertionError:
            if proc.exited():
                raise
            self.kill(proc, "timed", f"{point.what} never came within {PAUSE_TIMEOUT:.0f}s: killed then", started)


def test_fifty_kills_at_random_and_named_instants_then_exactly_once(
    processes: list[RuntimeProcess], pause_jar: Path, tmp_path: Path
) -> None:
    began = time.monotonic()
    seed = int(os.environ.get("STREAMJOB_KILL_SEED", "20261122"))
    rng = random.Random(seed)
    generator = load_generator()
    generated = generator.generate(FILES, SEED)
    generator.write(tmp_path / "events", generated)
    events = Input(tmp_path / "events", reference.from_generator(generated))
    out = tmp_path / "out"
    chain = Chain(tmp_path, example_job("entrypoint", events.directory, out, tmp_path / "job.json"), pause_jar, processes)

    # the first seconds of the fresh job
    for spec, what in ((r"write:/ckpt0/metadata$", "query metadata half written"),
                       (r"write:/ckpt0/sources/0/0$", "first source-log entry half written"),
                       (r"write:/ckpt0/offsets/0$", "first offset-log entry half written")):
        chain.paused_kill(PausePoint(spec, what), "fresh, named")
    while chain.latest() < 0 and sum(k["kind"] == "fresh, random" for k in chain.kills) < 6:
        started = time.monotonic()
        proc = chain.start()
        delay = rng.uniform(0.0, 12.0)
        time.sleep(delay)
        if proc.exited():
            raise AssertionError(f"{proc.label} exited {proc.proc.returncode}:\n{proc.log_tail()}")
        chain.kill(proc, "fresh, random", f"{delay:.1f}s after the process started", started)

    restores = 0
    while len(chain.kills) < KILLS:
        if len(chain.kills) >= 12 * (restores + 1):
            restores += 1
            switch_checkpoint(chain, rng, restores)
            continue
        roll = rng.random()
        if roll < 0.45:
            phase, (target, pattern) = rng.choice(list(PHASES)), rng.choice(list(TARGETS.items()))
            point = PausePoint(f"{phase}:{pattern.format(ckpt=chain.ckpt.name)}", f"{target} {PHASES[phase]}")
            chain.paused_kill(point, "pause in a Spark write")
        elif roll < 0.8:
            started = time.monotonic()
            proc = chain.start()
            before = chain.latest()
            try:
                proc.wait_for("the next commit", lambda s: (s["latestCompletedBatch"] or -1) > before, timeout=PAUSE_TIMEOUT)
            except AssertionError:
                if proc.exited():
                    raise
                chain.kill(proc, "timed", f"no commit after batch {before} within {PAUSE_TIMEOUT:.0f}s: killed then", started)
                continue
            delay = rng.uniform(0.0, 1.5)
            time.sleep(delay)
            chain.kill(proc, "timed", f"{delay:.2f}s after batch {before + 1} committed", started)
        else:
            stop, copied = rng.random() < 0.5, rng.randint(1, 6)
            point = PausePoint(f"savepoint:{copied}", f"{'stop-with-' if stop else 'running '}savepoint, {copied} files copied")
            started = time.monotonic()
            proc = chain.start(point)
            proc.wait_for("a commit", lambda s: s["latestCompletedBatch"] is not None and s["state"] == RunState.RUNNING, timeout=180)
            target = chain.tmp_path / f"sp-killed-{len(chain.kills)}"
            code, body = proc.request("POST", "/savepoints", {"path": target.as_uri(), "stop": stop})
            assert code == 202, body
            chain.wait_paused_or_kill(proc, point, "savepoint copy", started)

    final = RuntimeProcess(chain.tmp_path / "runs", chain.args("available-now"), label="final")
    processes.append(final.start())
    assert final.wait(900) == ExitCode.FINISHED, final.log_tail()
    got = outputs.file_sink_rows(out)
    expected = events.tumbling(events.recorded_plan(chain.ckpt))
    result = outputs.differences(got, expected)
    report = {
        "seed": seed, "kills": len(chain.kills), "restores": restores, "files": FILES, "processes": len(processes),
        "seconds": round(time.monotonic() - began), "result": result, "instants": chain.kills,
    }
    (tmp_path / "kills.json").write_text(json.dumps(report, indent=1))
    kinds: dict[str, int] = {}
    for k in chain.kills:
        kinds[k["kind"]] = kinds.get(k["kind"], 0) + 1
    print(f"\nkills={len(chain.kills)} kinds={kinds} restores={restores} seconds={report['seconds']} result={result} "
          f"report={tmp_path / 'kills.json'}")
    assert len(chain.kills) >= KILLS
    assert (result["missing"], result["duplicated"], result["different"], result["unexpected"]) == (0, 0, 0, 0), result
    assert got == expected


def switch_checkpoint(chain: Chain, rng: random.Random, number: int) -> None:
    """A completed stop-with-savepoint, then its restore into a fresh checkpoint, killed mid-copy."""
    proc = chain.start()
    proc.wait_for("a commit", lambda s: s["latestCompletedBatch"] is not None and s["state"] == RunState.RUNNING, timeout=180)
    savepoint = chain.tmp_path / f"sp-{number}"
    code, body = proc.request("POST", "/savepoints", {"path": savepoint.as_uri(), "stop": True})
    assert code == 202, body
    assert proc.wait(300) == ExitCode.STOPPED_FOR_SAVEPOINT, proc.log_tail()
    chain.ckpt, chain.restore_from = chain.tmp_path / f"ckpt{number}", savepoint.as_uri()
    copied = rng.randint(1, 8)
    chain.paused_kill(PausePoint(f"restore:{copied}", f"restore, {copied} files copied"), "restore copy")


# fifty driver starts take 15 to 25 minutes on two shared cores: above the suite's per-test timeout
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
