"""The control endpoint cannot be held open by clients without a token.

Real sockets on loopback against the real `ControlServer` (the controller is a
fake: these tests are about connections, not savepoints):
- connections that send nothing, or dribble a header byte at a time, are closed
  by the server within its request timeout, and an authenticated request is
  answered meanwhile;
- connections beyond the bound are answered 503 at once, not queued; once the
  idle ones are dropped, the endpoint serves again;
- a body over the limit, or a Content-Length that is not a number, gets a 4xx.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_runtime_units import FakeController, call

from job_runtime.run.control import ControlServer

TOKEN = "s3cret-token"
TIMEOUT = 3.0  # the server's per-request timeout in these tests


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for s in opened:
        s.close()


def connect(address: str, opened: list[socket.socket]) -> socket.socket:
    host, port = address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    opened.append(s)
    return s


def closed_by_server(s: socket.socket, within: float) -> bool:
    """True once the server has closed the connection (EOF or reset), polled until `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, min(0.5, deadline - time.monotonic())))
        try:
            data = s.recv(4096)
        except TimeoutError:
            continue
        except ConnectionError:
            return True
        if data == b"":
            return True
        # a reply (e.g. 503 or 408) before the close: keep reading until EOF
    return False


def test_idle_and_dribbling_connections_are_dropped_and_the_endpoint_still_answers(
    token_file: Path, sockets: list[socket.socket]
) -> None:
    server = ControlServer("127.0.0.1:0", token_file, FakeController(), request_timeout=TIMEOUT, max_connections=8)
    server.start()
    stop_dribbling = threading.Event()
    try:
        idle = [connect(server.address, sockets) for _ in range(3)]
        dribbler = connect(server.address, sockets)
        dribbler.sendall(b"GET /status HTTP/1.1\r\nHost: x\r\n")
        sent: list[int] = []

        def dribble() -> None:
            # one header byte every 0.2 s: never TIMEOUT between two bytes, so only a
            # deadline for the whole request can drop this client
            while not stop_dribbling.wait(0.2):
                try:
                    dribbler.sendall(b"X")
                except OSError:
                    return
                sent.append(1)

        thread = threading.Thread(target=dribble, daemon=True)
        thread.start()

        started = time.monotonic()
        assert call(server.address, "GET", "/status", TOKEN) == (200, {"state": "RUNNING", "lastBatchId": 3})
        assert time.monotonic() - started < TIMEOUT, "the authenticated request waited for the idle connections"

        for s in idle:
            assert closed_by_server(s, within=TIMEOUT + 10), "an idle connection was never closed"
        assert closed_by_server(dribbler, within=TIMEOUT + 10), "a dribbling connection was never closed"
        assert len(sent) >= 3, f"the dribbler sent only {len(sent)} bytes before being dropped"
        assert call(server.address, "GET", "/status", TOKEN)[0] == 200
    finally:
        stop_dribbling.set()
        server.close()


def test_connections_beyond_the_bound_are_refused_at_once(token_file: Path, sockets: list[socket.socket]) -> None:
    bound = 3
    server = ControlServer("127.0.0.1:0", token_file, FakeController(), request_timeout=2.0, max_connections=bound)
    server.start()
    try:
        held = [connect(server.address, sockets) for _ in range(bound)]
        # accepted in order: the held connections take every slot before the next one is accepted
        started = time.monotonic()
        code, body = call(server.address, "GET", "/status", TOKEN)
        assert (code, body) == (503, {"error": "too many open connections"})
        assert time.monotonic() - started < 2.0, "the refusal waited for a slot"

        for s in held:
            assert closed_by_server(s, within=15), "a held connection was never closed"
        deadline = time.monotonic() + 15
        while (code := call(server.address, "GET", "/status", TOKEN)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert code == 200, "the endpoint did not serve again once the held connections were dropped"
    finally:
        server.close()


def test_bodies_over_the_limit_and_bad_lengths_are_refused(token_file: Path, sockets: list[socket.socket]) -> None:
    server = ControlServer("127.0.0.1:0", token_file, FakeController(), request_timeout=1.0)
    server.start()
    try:
        big = b"{" + b" " * (64 * 1024) + b"}"
        assert call(server.address, "POST", "/savepoints", TOKEN, big)[0] == 413
        s = connect(server.address, sockets)
        s.sendall(
            b"POST /savepoints HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Length: -5\r\n\r\n"
        )
        s.settimeout(10)
        reply = b""
        while b"\r\n\r\n" not in reply and (chunk := s.recv(4096)):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 400 "), reply[:80]
        assert closed_by_server(s, within=TIMEOUT + 10)
    finally:
        server.close()
