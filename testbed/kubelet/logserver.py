"""The kubelet's HTTPS endpoint for container logs, so ``kubectl logs`` and ``read_namespaced_pod_log`` work.

Started by ``testbed.kubelet.agent``; its port is published in the Node's
``status.daemonEndpoints.kubeletEndpoint`` and the API server proxies
``pods/log`` requests to it with its kubelet client certificate, which this
server requires (signed by the cluster CA). Serves
``GET /containerLogs/{namespace}/{pod}/{container}`` with ``tailLines``,
``limitBytes`` and ``follow``; ``timestamps``, ``sinceSeconds`` and ``previous``
are accepted and ignored (logs are one file per container, restarts appended).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

log = logging.getLogger(__name__)


def _tail_lines(data: bytes, lines: int) -> bytes:
    if lines <= 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


def _running(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


class LogServer:
    def __init__(
        self,
        *,
        host: str,
        logs_dir: Path,
        cert: Path,
        key: Path,
        client_ca: Path,
        pod_log_dir: Callable[[str, str], Path | None],
    ) -> None:
        self.logs_dir = logs_dir
        self.pod_log_dir = pod_log_dir
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                log.debug("Served request %s", format % args)

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self.httpd.serve_forever, name="log-server", daemon=True).start()
        log.info("Started log server port=%d", self.port)

    def stop(self) -> None:
        self.httpd.shutdown()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._error(request, 404, f"not found: {url.path} (this kubelet serves /containerLogs only)")
            return
        _, namespace, pod, container = parts
        query = urllib.parse.parse_qs(url.query)
        folder = self.pod_log_dir(namespace, pod)
        path = folder / f"{container}.log" if folder else None
        if path is None or not path.exists():
            self._error(request, 404, f'container "{container}" in pod "{pod}" has no logs on this node')
            return
        data = path.read_bytes()
        if "tailLines" in query:
            data = _tail_lines(data, int(query["tailLines"][0]))
        limit = int(query["limitBytes"][0]) if "limitBytes" in query else None
        if limit is not None:
            data = data[:limit]
        follow = query.get("follow", ["false"])[0] == "true"
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        if not follow:
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
            return
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        try:
            self._chunk(request, data)
            offset = path.stat().st_size
            pid_file = folder / "pid" if folder else Path("/nonexistent")
            while True:
                size = path.stat().st_size
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        self._chunk(request, f.read(size - offset))
                    offset = size
                elif not _running(pid_file):
                    break
                else:
                    time.sleep(0.3)
            request.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass

    @staticmethod
    def _chunk(request: BaseHTTPRequestHandler, data: bytes) -> None:
        if data:
            request.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            request.wfile.flush()

    @staticmethod
    def _error(request: BaseHTTPRequestHandler, code: int, message: str) -> None:
        body = message.encode()
        request.send_response(code)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
