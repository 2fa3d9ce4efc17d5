"""Component start-up: failures show the log tail, a port lost to a race is retried."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.proc import ComponentError, ManagedProcess, start_with_port_retry


def test_a_component_that_exits_raises_with_its_log_tail(tmp_path: Path) -> None:
    proc = ManagedProcess("broken", ["sh", "-c", "echo 'fatal: bad flag --x'; exit 2"], tmp_path / "broken.log")

    with pytest.raises(ComponentError, match=r"(?s)broken exited with code 2.*fatal: bad flag --x"):
        proc.wait_ready(lambda: False, timeout=10)


def test_a_port_lost_to_a_race_is_retried(tmp_path: Path) -> None:
    attempts: list[int] = []

    def start() -> ManagedProcess:
        attempts.append(1)
        script = "echo 'listen tcp 127.0.0.1:1234: bind: address already in use'; exit 1" if len(attempts) == 1 else "sleep 30"
        return ManagedProcess("racy", ["sh", "-c", script], tmp_path / f"racy-{len(attempts)}.log")

    proc = start_with_port_retry(start, lambda p: p.wait_ready(lambda: True if len(attempts) > 1 else False, timeout=10))
    try:
        assert len(attempts) == 2
        assert proc.alive()
    finally:
        proc.stop()
