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


def test_a_port_is_free_once_its_listener_is_gone_even_with_connections_in_time_wait() -> None:
    """`streamjob-testbed up` right after `down` must get 9000 and 9092 back (the examples name them)."""
    import socket

    from testbed.proc import port_is_free

    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert not port_is_free(port)
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server side closes first: its end of the connection stays in TIME_WAIT
    client.close()
    server.close()
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    time_wait = [r for r in rows if r[1] == f"0100007F:{port:04X}" and r[3] == "06"]
    assert time_wait, "the scenario needs a connection in TIME_WAIT on the port"
    assert port_is_free(port)
