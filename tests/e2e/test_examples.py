"""The README's first command, as a new user runs it: `bash scripts/dev.sh` brings every example up.

The script itself runs (bootstrap, a test bed of its own with the operator installed by its
Helm chart, the Kafka example's input, `kubectl apply -f examples/`) in a state folder of its
own (STREAMJOB_TESTBED_DIR), so a fresh clone's first run and CI take the same path. Every
`examples/*.yaml` is covered: a new example needs no new test. Host paths the examples mount
are moved aside first, as on a fresh machine (a root-owned hostPath directory created by the
kubelet is what broke `minimal` and `kafka-windows` on one). Then, independently of the
script's own wait:

- every StreamJob that should run is Ready with a committed batch, one that is declared
  suspended has no driver;
- the Kafka example's windows are read back by a read_committed consumer: each window of
  the produced events exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_kafka import committed_windows, load_events_module, reference_windows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
# what scripts/dev.sh produces to the Kafka example's input topic
OWN_BED = True  # dev.sh starts a test bed of its own: the module runs before the session's (tests/conftest.py)
KAFKA_EVENTS = 600
DEV_TIMEOUT = 1200  # a warm bootstrap, a test bed start, four drivers on a loaded 2-core machine


def documents() -> list[dict[str, Any]]:
    return [d for path in EXAMPLES for d in yaml.safe_load_all(path.read_text()) if d]


def host_paths(docs: list[dict[str, Any]]) -> list[Path]:
    """Every hostPath the examples' pod templates mount."""
    found: list[Path] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("hostPath"), dict) and "path" in node["hostPath"]:
                found.append(Path(node["hostPath"]["path"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(docs)
    return found


@pytest.fixture
def fresh_host_paths() -> Iterator[list[Path]]:
    """The examples' host paths moved aside (a fresh machine has none), put back afterwards."""
    moved: list[tuple[Path, Path]] = []
    paths = host_paths(documents())
    for path in paths:
        if path.exists():
            aside = path.with_name(f"{path.name}.before-test-examples-{os.getpid()}")
            path.rename(aside)
            moved.append((path, aside))
    yield paths
    for path, aside in moved:
        subprocess.run(["rm", "-rf", str(path)], check=False)
        aside.rename(path)


class DevTestBed:
    """scripts/dev.sh's test bed: its kubectl and its env file, and `down` at the end."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.env = dict(os.environ, STREAMJOB_TESTBED_DIR=str(state_dir), DEV_READY_TIMEOUT="600")
        self.env.pop("KUBECONFIG", None)

    def exports(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in (self.state_dir / "env").read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                key, value = line[len("export "):].split("=", 1)
                out[key] = value
        return out

    def kubectl_json(self, *args: str) -> Any:
        env = self.exports()
        kubectl = Path(env["PATH"].split(":")[0]) / "kubectl"
        result = subprocess.run([str(kubectl), f"--kubeconfig={env['KUBECONFIG']}", *args, "-o", "json"],
                                capture_output=True, text=True, timeout=60, check=True)
        return json.loads(result.stdout)

    def down(self) -> None:
        testbed = Path(sys.executable).with_name("streamjob-testbed")
        subprocess.run([str(testbed), "down"], env=self.env, timeout=120, check=False)


@pytest.mark.timeout(DEV_TIMEOUT + 600)
def test_dev_sh_brings_every_example_to_ready_on_a_fresh_machine(tmp_path: Path, fresh_host_paths: list[Path]) -> None:
    docs = documents()
    jobs = [d for d in docs if d.get("kind") == "StreamJob"]
    assert jobs, "examples/ holds no StreamJob"
    bed = DevTestBed(tmp_path / "testbed")
    log = tmp_path / "dev.log"
    try:
        with open(log, "wb") as out:
            started = time.monotonic()
            result = subprocess.run(["bash", str(REPO / "scripts" / "dev.sh")], cwd=REPO, env=bed.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=DEV_TIMEOUT)
            took = time.monotonic() - started
        text = log.read_text(errors="replace")
        assert result.returncode == 0, f"scripts/dev.sh exited {result.returncode} after {took:.0f}s:\n{text[-6000:]}"
        print(f"scripts/dev.sh: every example Ready in {took:.0f}s")

        listed = {item["metadata"]["name"]: item for item in bed.kubectl_json("get", "streamjobs", "-n", "default")["items"]}
        assert sorted(listed) == sorted(j["metadata"]["name"] for j in jobs)
        for job in jobs:
            name, status = job["metadata"]["name"], listed[job["metadata"]["name"]].get("status") or {}
            if job["spec"].get("state") == "suspended":
                assert status.get("state") == "Suspended", (name, status)
                pods = bed.kubectl_json("get", "pods", "-n", "default", "-l", f"streamjob.io/job={name}")["items"]
                assert pods == [], f"{name} is declared suspended but has pods {[p['metadata']['name'] for p in pods]}"
            else:
                assert status.get("ready") is True, (name, status)
                assert (status.get("lastCheckpoint") or {}).get("batchId", -1) >= 0, (name, status)

        kafka_jobs = [j for j in jobs if j["spec"]["job"].get("pipeline", {}).get("sink", {}).get("kind") == "kafka"]
        if kafka_jobs:
            bootstrap = bed.exports()["STREAMJOB_KAFKA_BOOTSTRAP"]
            expected = reference_windows(load_events_module().generate(KAFKA_EVENTS))
            for job in kafka_jobs:
                topic = job["spec"]["job"]["pipeline"]["sink"]["kafka"]["topic"]
                got = committed_windows(bootstrap, topic, expect=sum(expected.values()), timeout=300)
                missing, duplicated = expected - got, {w: n - 1 for w, n in got.items() if n > 1}
                assert not missing and not duplicated and set(got) <= set(expected), (
                    f"{job['metadata']['name']}: {len(missing)} windows missing, {len(duplicated)} duplicated, "
                    f"{len(set(got) - set(expected))} unexpected, of {sum(expected.values())}")
    finally:
        bed.down()
