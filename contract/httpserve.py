"""An HTTP server no client can hold: a deadline per request and a bounded number of connections.

Used by the driver's control endpoint (``job_runtime.run.control``) and the
operator's health endpoints (``streamjob_operator.health``). Standard library
only. Every request (request line, headers and body) must arrive within
``request_timeout`` seconds of the connection being ready for it, whether the
client sends nothing or dribbles a byte at a time; an idle keep-alive
connection is closed after the same time, and so is a client that stops
reading a response. At most ``max_connections`` connections are served at
once; one more is answered 503 and closed at once, without a thread.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 16
_BUSY_BODY = b'{"error": "too many open connections"}\n'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class _DeadlineReader(io.RawIOBase):
    """The connection's read side with a deadline per request, not per recv: a client
    dribbling a byte at a time is dropped as surely as one that sends nothing."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = float("inf")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received in time")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler whose reads keep the server's per-request deadline; ``send`` answers with a body."""

    server: BoundedHTTPServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the stdlib's reader, replaced by one that keeps the deadline
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        # The clock starts when the connection is ready for a request: idle keep-alive
        # time counts. The stdlib closes the connection on TimeoutError.
        self._reader.deadline = time.monotonic() + self.server.request_timeout
        super().handle_one_request()

    def send(self, status: HTTPStatus | int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.connection.settimeout(self.server.request_timeout)  # a client that stops reading is dropped too
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class BoundedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BoundedHandler], *,
                 request_timeout: float = REQUEST_TIMEOUT_SECONDS, max_connections: int = MAX_CONNECTIONS) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)
        self.request_timeout = request_timeout
        self._slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("refused connection client=%s reason=too many open connections", client_address[0])
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
