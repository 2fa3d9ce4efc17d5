"""Runs the job runtime as a real process (`python -m job_runtime.main run ...`) for the runtime tests.

Each RuntimeProcess is one driver: its own JVM, its own process group (so a
SIGKILL takes the JVM down with it, as a pod kill would), a log file, and a
client for its control endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "jobs"
TEST_JOBS = Path(__file__).resolve().parent / "jobs"
TOKEN = "runtime-test-token-0123456789"
S3_BUCKET = "streamjob-runtime"

# Small and quick: tests run on two cores. The JVM flags trade peak speed for start-up time
# (C1 only, serial GC); a class-data-sharing archive, when the session made one, halves it again.
TEST_CONF = (
    "spark.ui.enabled=false",
    "spark.sql.streaming.stateStore.maintenanceInterval=5s",
    "spark.driver.host=127.0.0.1",
    "spark.driver.bindAddress=127.0.0.1",
)
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:cds=off -Xlog:cds+dynamic=off"
class_archive: Path | None = None  # set by the jvm_class_archive fixture


def java_options(dump_to: Path | None = None) -> str:
    if dump_to is not None:
        return f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={dump_to}"
    if class_archive is not None and class_archive.exists():
        return f"{JAVA_OPTIONS} -XX:SharedArchiveFile={class_archive}"
    return JAVA_OPTIONS


def example_job(name: str, events: Path, output: Path, target: Path) -> Path:
    """examples/jobs/<name>.yaml with its input and output pointed at test folders, written to `target`."""
    job = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    sources = job["pipeline"]["sources"] if "pipeline" in job else job["sources"]
    sink = job["pipeline"]["sink"] if "pipeline" in job else job["sink"]
    for source in sources:
        source["path"] = events.as_uri()
    sink["path"] = output.as_uri()
    if "pythonPath" in job:
        job["pythonPath"] = [str(EXAMPLES)]
    target.write_text(json.dumps(job))
    return target


def entrypoint_job(function: str, events: Path, output: Path, target: Path) -> Path:
    """examples/jobs/entrypoint.yaml running tests/runtime/jobs/operator_changes.py:`function` instead."""
    job = yaml.safe_load((EXAMPLES / "entrypoint.yaml").read_text())
    job["entrypoint"] = f"operator_changes:{function}"
    job["pythonPath"] = [str(TEST_JOBS), str(EXAMPLES)]
    job["sources"][0]["path"] = events.as_uri()
    job["sink"]["path"] = output.as_uri()
    target.write_text(json.dumps(job))
    return target


def runtime_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class RuntimeProcess:
    workdir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=runtime_env)
    label: str = "job"
    dump_class_archive: Path | None = None
    master: str = "local[2]"

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.workdir / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.address_file = self.workdir / f"{self.label}.address"
        self.address_file.unlink(missing_ok=True)
        self.log_path = self.workdir / f"{self.label}.log"
        self.termination_file = self.workdir / f"{self.label}.termination.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self._apps: set[str] = set()  # standalone application ids of a local-cluster run

    def start(self) -> "RuntimeProcess":
        command = [
            sys.executable, "-m", "job_runtime.main", "run", *self.args,
            "--token-file", str(self.token_file),
            "--control-address", "127.0.0.1:0",
            "--control-address-file", str(self.address_file),
            "--termination-message-file", str(self.termination_file),
            "--master", self.master,
        ]
        for conf in TEST_CONF:
            command += ["--conf", conf]
        command += ["--conf", f"spark.driver.extraJavaOptions={java_options(self.dump_class_archive)}"]
        env = self.env
        if self.master.startswith("local-cluster"):
            # The jars reach the executors on spark.executor.extraClassPath (this machine's files).
            # Through spark.jars each executor would also copy them (the AWS SDK bundle alone is
            # 686 MB) into its work dir under the pyspark package and its fetch cache: a few
            # executor kills filled the disk.
            command += ["--conf", f"spark.executor.extraJavaOptions={JAVA_OPTIONS}", "--conf", "spark.jars="]
            # the in-process standalone master and workers (and their UIs) bind where SPARK_LOCAL_IP says
            env = {**env, "SPARK_LOCAL_IP": "127.0.0.1"}
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            command, cwd=self.workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def _remove_work_dirs(self) -> None:
        """The standalone workers' per-application work dirs (executor logs), left by a killed run."""
        import pyspark

        for app in self._apps:
            shutil.rmtree(Path(pyspark.__file__).parent / "work" / app, ignore_errors=True)

    def executor_pids(self) -> dict[str, int]:
        """The executor JVMs of this driver (a `local-cluster` master) by executor id: its process
        group's CoarseGrainedExecutorBackend processes, as /proc shows them now."""
        found: dict[str, int] = {}
        for pid, args in self._group_processes():
            if any(a.endswith("CoarseGrainedExecutorBackend") for a in args) and "--executor-id" in args:
                found[args[args.index("--executor-id") + 1]] = pid
                if "--app-id" in args:
                    self._apps.add(args[args.index("--app-id") + 1])
        return found

    # ---- lifecycle ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout: float) -> int:
        """The driver's exit code, once the driver and every process it left are gone.

        In a pod the driver is PID 1: when it exits the kernel kills the rest of the
        container (its JVM, maybe still finishing a state store upload). Here the JVM would
        outlive it for a moment and write to the checkpoint the test is about to read."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
            self._end_group()
            return code
        except subprocess.TimeoutExpired:
            stuck = self._stream_thread_stack()
            self.kill()
            raise AssertionError(f"{self.label} did not exit within {timeout}s; the query's thread:\n{stuck}\n"
                                 f"log tail:\n{self.log_tail()}") from None
        finally:
            self._log.close()
            self._remove_work_dirs()

    def exited(self) -> bool:
        """Whether the driver has exited; if it has, the processes it left are ended too (see wait)."""
        if self.proc is None or self.proc.poll() is None:
            return False
        self._end_group()
        return True

    def _end_group(self) -> None:
        """SIGKILL what is left of the run's process group and wait until /proc shows none of it."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 30
        while self._group_processes() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _group_processes(self) -> list[tuple[int, list[str]]]:
        """(pid, argv) of every process in this run's process group (the driver, its JVM, executors), as /proc shows them now."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
            if int(group) == self.pid and state != "Z":  # an exited process not yet reaped is gone
                found.append((int(entry.name), cmdline.decode(errors="replace").split("\0")))
        return found

    def _stream_thread_stack(self) -> str:
        """Where a hung run's streaming query thread is (jstack of its JVM, kept as <label>.jstack)."""
        try:
            # the jstack beside each JVM's own java binary (a bare "java" finds it on PATH)
            jvms = [(pid, Path(args[0]).with_name("jstack")) for pid, args in self._group_processes() if args and args[0].endswith("java")]
            dumps = [subprocess.run([str(jstack), str(pid)], capture_output=True, text=True, timeout=60).stdout for pid, jstack in jvms]
            text = "\n".join(dumps)
            (self.workdir / f"{self.label}.jstack").write_text(text)
            threads = [t for t in text.split("\n\n") if "stream execution thread" in t]
            return "\n".join(threads)[:6000] or f"(no stream execution thread in {self.workdir / (self.label + '.jstack')})"
        except Exception as err:  # a diagnosis only: the timeout is the failure
            return f"(no thread dump: {err})"

    def kill(self) -> None:
        """SIGKILL the whole process group: Python driver and its JVM, like a pod kill."""
        if self.master.startswith("local-cluster") and self.proc is not None:
            self.executor_pids()  # learn the application id while its executors run
        self._end_group()  # the driver if it runs, and any JVM a dead driver left behind
        if self.proc is not None:
            self.proc.wait(30)
        self._remove_work_dirs()

    def terminate(self) -> None:
        """SIGTERM to the driver process only, as the kubelet does to a container's PID 1."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait_paused(self, pause_dir: Path, timeout: float = 240, points: int = 1) -> str:
        """Wait until the pause hooks (tests/runtime/pause_points.py) hold the process at all `points`
        armed points; what they paused at, one a line."""
        markers = [pause_dir / f"paused-{i}" for i in range(points)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(m.exists() for m in markers):
                return "\n".join(m.read_text().strip() for m in markers)
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.label} exited {self.proc.returncode} before pausing:\n{self.log_tail()}")
            time.sleep(0.05)
        raise AssertionError(f"{self.label} never paused within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def termination(self) -> dict[str, Any]:
        return json.loads(self.termination_file.read_text())

    # ---- control endpoint -------------------------------------------------------------

    def address(self, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.address_file.exists():
                return self.address_file.read_text().strip()
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.label} exited {self.proc.returncode} before listening:\n{self.log_tail()}")
            time.sleep(0.1)
        raise AssertionError(f"{self.label} never wrote {self.address_file}")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None, token: str | None = TOKEN) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://{self.address()}{path}", data=data, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def stop_with_savepoint(self, timeout: float = 300) -> str:
        """POST /savepoints with stop; the process must exit STOPPED_FOR_SAVEPOINT. Returns the savepoint's path."""
        from streamjob_contract.exitcodes import ExitCode

        code, accepted = self.request("POST", "/savepoints", {"stop": True})
        assert code == 202, accepted
        assert self.wait(timeout) == ExitCode.STOPPED_FOR_SAVEPOINT, self.log_tail()
        return str(accepted["path"])

    def status(self) -> dict[str, Any]:
        code, body = self.request("GET", "/status")
        assert code == 200, (code, body)
        return body

    def wait_for(self, what: str, check: Callable[[dict[str, Any]], bool], timeout: float = 240) -> dict[str, Any]:
        """Poll /status until `check` holds; fail with the log when the process exits first."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"{self.label} exited {self.proc.returncode} while waiting for {what}:\n{self.log_tail()}")
            try:
                last = self.status()
                if check(last):
                    return last
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"{self.label}: no {what} within {timeout}s; last status {last}\n{self.log_tail()}")


def run_args(job: Path, checkpoint: str, *, name: str = "job", trigger: str = "available-now", partitions: int = 2, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        "--job", str(job), "--name", name, "--namespace", "tests",
        "--checkpoint", checkpoint, "--state-partitions", str(partitions),
        "--trigger-interval", trigger, *extra,
    ]
