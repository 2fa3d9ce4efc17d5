"""The driver's HTTP control endpoint: health, status, savepoints, stop.

Started by job_runtime.runner.Runner; called over HTTP by the operator (and by
tests). Standard library only: a ThreadingHTTPServer in a daemon thread that
translates requests into calls on a `Controller` (the runner) and never
touches Spark itself.

API (JSON in and out; every path but /healthz needs `Authorization: Bearer
<token>`, the token being the content of the token file, compared in
constant time; anything else gets 401):

    GET  /healthz               200 {"state"} while the runtime is alive, 503 once it failed
    GET  /status                200 query and progress figures (see Runner.status)
    POST /savepoints            body {"path": optional str, "stop": bool}
                                202 {"id", "path"}; 409 when one is in progress;
                                400 naming the path when it is not below the
                                job's savepoint location (or there is none)
    GET  /savepoints            200 {"savepoints": [...]} (most recent last, bounded)
    GET  /savepoints/<id>       200 {"id", "state": IN_PROGRESS|COMPLETED|FAILED,
                                     "path", "batchId", "stop", "error"}; 404 unknown id
    POST /stop                  202 {"state": "STOPPING"}: stop without savepoint, exit 11

The confinement rule is job_runtime.savepoint_target's; the writer refuses a
target holding anything but an incomplete savepoint of ours (job_runtime.savepoint).

Held connections: every request (request line, headers and body) must arrive
within `request_timeout` seconds of the connection being ready for it, whether
the client sends nothing or dribbles a byte at a time; an idle keep-alive
connection is closed after the same time. At most `max_connections` connections
are served at once; one more is answered 503 and closed at once, without a
thread. Bodies are limited to MAX_BODY_BYTES (413).
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("job_runtime.control")

MAX_BODY_BYTES = 64 * 1024
REQUEST_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 16
_BUSY_BODY = b'{"error": "too many open connections"}\n'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nRetry-After: 1\r\n"
    + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class ControlError(Exception):
    """A request the controller refuses; carries the HTTP status to answer with."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Controller(Protocol):
    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def status(self) -> dict[str, Any]: ...

    def request_savepoint(self, path: str | None, stop: bool) -> dict[str, Any]: ...

    def savepoint(self, savepoint_id: str) -> dict[str, Any] | None: ...

    def savepoints(self) -> list[dict[str, Any]]: ...

    def request_stop(self) -> dict[str, Any]: ...


def parse_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' (IPv6 as '[::1]:PORT') -> (host, port); raises ValueError naming the value."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--control-address: expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def read_token(token_file: Path) -> str:
    """The token, whitespace stripped; raises ValueError when the file is unreadable or empty."""
    try:
        token = token_file.read_text().strip()
    except OSError as err:
        raise ValueError(f"--token-file {token_file}: cannot read: {err.strerror}") from None
    if not token:
        raise ValueError(f"--token-file {token_file}: is empty")
    return token


def authorized(header: str | None, token: str) -> bool:
    """Constant-time check of an `Authorization: Bearer <token>` header."""
    if not header or not token:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


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


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("served request client=%s %s", self.client_address[0], format % args)

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.connection.settimeout(self.server.request_timeout)  # a client that stops reading is dropped too
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="streamjob"')
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        try:
            token = read_token(self.server.token_file)
        except ValueError as err:
            # A missing token file must never open the endpoint.
            log.error("refused request path=%s reason=%s", self.path, err)
            token = ""
        if authorized(self.headers.get("Authorization"), token):
            return True
        log.warning("refused unauthenticated request client=%s method=%s path=%s", self.client_address[0], self.command, self.path)
        self._send(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
        return False

    def _body(self) -> dict[str, Any]:
        raw_length = self.headers.get("Content-Length") or "0"
        if not raw_length.strip().isdigit():
            self.close_connection = True
            raise ControlError(HTTPStatus.BAD_REQUEST, f"Content-Length: not a byte count: {raw_length[:40]!r}")
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read: the connection cannot serve another request
            raise ControlError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
        raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as err:
            raise ControlError(HTTPStatus.BAD_REQUEST, f"body: not JSON: {err}") from None
        if not isinstance(body, dict):
            raise ControlError(HTTPStatus.BAD_REQUEST, "body: must be a JSON object")
        return body

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        controller = self.server.controller
        try:
            if method == "GET" and path == "/healthz":
                ok, body = controller.health()
                self._send(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, body)
                return
            if not self._authorized():
                return
            if method == "GET" and path == "/status":
                self._send(HTTPStatus.OK, controller.status())
            elif method == "POST" and path == "/savepoints":
                body = self._body()
                target = body.get("path")
                stop = body.get("stop", False)
                if target is not None and (not isinstance(target, str) or not target):
                    raise ControlError(HTTPStatus.BAD_REQUEST, "body.path: must be a non-empty string")
                if not isinstance(stop, bool):
                    raise ControlError(HTTPStatus.BAD_REQUEST, "body.stop: must be true or false")
                self._send(HTTPStatus.ACCEPTED, controller.request_savepoint(target, stop))
            elif method == "GET" and path == "/savepoints":
                self._send(HTTPStatus.OK, {"savepoints": controller.savepoints()})
            elif method == "GET" and path.startswith("/savepoints/"):
                found = controller.savepoint(path.removeprefix("/savepoints/"))
                if found is None:
                    raise ControlError(HTTPStatus.NOT_FOUND, f"no savepoint with id {path.removeprefix('/savepoints/')!r}")
                self._send(HTTPStatus.OK, found)
            elif method == "POST" and path == "/stop":
                self._send(HTTPStatus.ACCEPTED, controller.request_stop())
            else:
                raise ControlError(HTTPStatus.NOT_FOUND, f"no route {method} {path}")
        except TimeoutError:
            self.close_connection = True
            log.warning("dropped slow request client=%s method=%s path=%s", self.client_address[0], method, path)
        except ControlError as err:
            self._send(err.status, {"error": err.message})
        except Exception as err:  # the endpoint must outlive a bad request
            log.exception("failed request method=%s path=%s", method, path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(err).__name__}: {err}"})

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802 - stdlib naming
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], controller: Controller, token_file: Path, request_timeout: float, max_connections: int
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.controller = controller
        self.token_file = token_file
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


class ControlServer:
    """The control endpoint, serving from a daemon thread until `close()`."""

    def __init__(
        self,
        address: str,
        token_file: Path,
        controller: Controller,
        *,
        request_timeout: float = REQUEST_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        read_token(token_file)  # fail at start, not at the first request
        self._server = _Server(parse_address(address), controller, token_file, request_timeout, max_connections)
        self._thread = threading.Thread(target=self._server.serve_forever, name="control-endpoint", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        self._thread.start()
        log.info("started control endpoint address=%s", self.address)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
