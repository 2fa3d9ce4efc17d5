"""Child processes of the test bed: start with a log file, wait until ready, stop.

Called by ``testbed.control_plane``, ``testbed.s3`` and ``testbed.cluster`` for
every long-running component (etcd, kube-apiserver, ...). Each child is tied to
the starting thread with ``setpriv --pdeathsig KILL`` so nothing outlives a
crashed test session.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


class ComponentError(RuntimeError):
    """A test-bed component failed to start; the message carries its log tail."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:`port`.

    SO_REUSEADDR as the servers themselves set it (Go and Java do on Linux): a port whose
    last connections are still in TIME_WAIT (a test bed stopped a moment ago) is free for
    them, and must be for this check too, or `streamjob-testbed up` right after `down`
    moves S3 off the 9000 the examples name.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text.splitlines()[-lines:])


def port_conflict(log_path: Path) -> bool:
    """True when a component's log says it lost a race for its port."""
    text = tail(log_path, 60).lower()
    return "address already in use" in text or "bind: address" in text


class ManagedProcess:
    """One running component with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        prefix: list[str] = []
        setpriv = shutil.which("setpriv")
        if setpriv:
            prefix = [setpriv, "--pdeathsig", "KILL", "--"]
        with open(log_path, "ab") as out:
            self.popen = subprocess.Popen(
                prefix + self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
            )
        log.info("Started component=%s pid=%d log=%s", name, self.popen.pid, log_path)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait_ready(self, probe: Callable[[], bool], timeout: float, what: str = "ready") -> None:
        """Polls ``probe`` until it returns True; raises with the log tail on exit or timeout."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if not self.alive():
                raise ComponentError(
                    f"{self.name} exited with code {self.popen.returncode} before it was {what}; "
                    f"log {self.log_path}:\n{tail(self.log_path)}"
                )
            try:
                if probe():
                    log.info("Became ready component=%s pid=%d", self.name, self.pid)
                    return
            except Exception as exc:  # probes fail in many ways until the server is up
                last_error = f"{type(exc).__name__}: {exc}"
            time.sleep(0.25)
        raise ComponentError(
            f"{self.name} was not {what} within {timeout:.0f}s (last probe error: {last_error or 'none'}); "
            f"log {self.log_path}:\n{tail(self.log_path)}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(timeout=timeout)
            log.info("Stopped component=%s pid=%d exit_code=%s", self.name, self.pid, self.popen.returncode)
        else:
            # The leader is gone; anything left in its group is stray.
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def start_with_port_retry(
    start: Callable[[], ManagedProcess],
    ready: Callable[[ManagedProcess], None],
    *,
    attempts: int = 3,
) -> ManagedProcess:
    """Starts a component on freshly picked ports, retrying when a port was taken meanwhile."""
    for attempt in range(1, attempts + 1):
        proc = start()
        try:
            ready(proc)
            return proc
        except ComponentError:
            proc.stop()
            if attempt < attempts and port_conflict(proc.log_path):
                log.warning("Retried component=%s reason=port-in-use attempt=%d", proc.name, attempt)
                continue
            raise
    raise AssertionError("unreachable")
