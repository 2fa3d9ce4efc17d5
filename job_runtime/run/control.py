"""The driver's HTTP control endpoint: health, status, savepoints, stop.

Started by job_runtime.run.runner.Runner; called over HTTP by the operator (and by
tests). Standard library only: a ThreadingHTTPServer in a daemon thread that
translates requests into calls on a `Controller` (the runner) and never
touches Spark itself.

API (JSON in and out; every path but /healthz needs `Authorization: Bearer
<token>`, the token being the content of the token file, compared in
constant time; anything else gets 401):

    GET  /healthz               200 {"state"} while the runtime is alive, 503 once it failed
    GET  /status                200 query and progress figures (see Runner.status)
    POST /savepoints            body {"path": optional str, "stop": bool, "id": optional str}: the id names the
                                request (the operator records it before it asks); asking again with a known
                                id answers that request again, so a retried POST never takes a second savepoint
                                202 {"id", "path"}; 409 when one is in progress;
                                400 naming the path when it is not below the
                                job's savepoint location (or there is none)
    GET  /savepoints            200 {"savepoints": [...]} (most recent last, bounded)
    GET  /savepoints/<id>       200 {"id", "state": IN_PROGRESS|COMPLETED|FAILED,
                                     "path", "batchId", "stop", "error"}; 404 unknown id
    POST /stop                  202 {"state": "STOPPING"}: stop without savepoint, exit 11
    POST /release               body {"restoreFrom": str}: a standby (--standby, state STANDBY) restores that
                                savepoint, claims the checkpoint, takes the epoch and starts the query;
                                202 {"state", "restoreFrom"}; asking again with the same savepoint answers
                                the same (a retried release does nothing twice); 409 when the driver is not a
                                standby, not ready yet, or was released with another savepoint

The confinement rule is job_runtime.savepoints.target's; the writer refuses a
target holding anything but an incomplete savepoint of ours (job_runtime.savepoints).

Held connections: a deadline per request and at most `max_connections` at once
(streamjob_contract.httpserve, shared with the operator's health endpoints). Bodies are
limited to MAX_BODY_BYTES (413).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from http import HTTPStatus
from pathlib import Path
from typing import Any, Protocol

from streamjob_contract.httpserve import MAX_CONNECTIONS, REQUEST_TIMEOUT_SECONDS, BoundedHandler, BoundedHTTPServer

log = logging.getLogger("job_runtime.control")

MAX_BODY_BYTES = 64 * 1024
SAVEPOINT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class ControlError(Exception):
    """A request the controller refuses; carries the HTTP status to answer with."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Controller(Protocol):
    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def status(self) -> dict[str, Any]: ...

    def request_savepoint(self, path: str | None, stop: bool, savepoint_id: str | None = None) -> dict[str, Any]: ...

    def savepoint(self, savepoint_id: str) -> dict[str, Any] | None: ...

    def savepoints(self) -> list[dict[str, Any]]: ...

    def request_stop(self) -> dict[str, Any]: ...

    def release(self, restore_from: str) -> dict[str, Any]: ...


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


class _Handler(BoundedHandler):
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("served request client=%s %s", self.client_address[0], format % args)

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        headers = {"WWW-Authenticate": 'Bearer realm="streamjob"'} if status == HTTPStatus.UNAUTHORIZED else None
        self.send(status, json.dumps(body).encode(), "application/json", headers)

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
                wanted = body.get("id")
                if wanted is not None and (not isinstance(wanted, str) or not SAVEPOINT_ID.fullmatch(wanted)):
                    raise ControlError(HTTPStatus.BAD_REQUEST, "body.id: must be 1-63 lowercase letters, digits or '-'")
                self._send(HTTPStatus.ACCEPTED, controller.request_savepoint(target, stop, wanted))
            elif method == "GET" and path == "/savepoints":
                self._send(HTTPStatus.OK, {"savepoints": controller.savepoints()})
            elif method == "GET" and path.startswith("/savepoints/"):
                found = controller.savepoint(path.removeprefix("/savepoints/"))
                if found is None:
                    raise ControlError(HTTPStatus.NOT_FOUND, f"no savepoint with id {path.removeprefix('/savepoints/')!r}")
                self._send(HTTPStatus.OK, found)
            elif method == "POST" and path == "/stop":
                self._send(HTTPStatus.ACCEPTED, controller.request_stop())
            elif method == "POST" and path == "/release":
                restore_from = self._body().get("restoreFrom")
                if not isinstance(restore_from, str) or not restore_from:
                    raise ControlError(HTTPStatus.BAD_REQUEST, "body.restoreFrom: must be the savepoint to restore")
                self._send(HTTPStatus.ACCEPTED, controller.release(restore_from))
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


class _Server(BoundedHTTPServer):
    def __init__(
        self, address: tuple[str, int], controller: Controller, token_file: Path, request_timeout: float, max_connections: int
    ) -> None:
        super().__init__(address, _Handler, request_timeout=request_timeout, max_connections=max_connections)
        self.controller = controller
        self.token_file = token_file


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
