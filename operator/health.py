"""The operator's health endpoints, served from process start, standby or leader.

Called by ``streamjob_operator.main`` before the leader election starts, so a
standby answers its liveness probe while it waits for the Lease (kopf's own
liveness endpoint exists only once kopf runs, i.e. on the leader).

- ``/healthz`` (the liveness path given by ``--liveness``): 200 while the
  election loop goes round and, on the leader, kopf's event loop answers.
  A restart would cure neither failing, so nothing else counts.
- ``/readyz``: 200 on the leader, and on a standby that could read the Lease
  recently (it could take over); 503 otherwise. Not "leader only": a
  Deployment of two replicas would then never be Available (``helm --wait``
  and ``kubectl rollout status`` would hang) and the metrics Service would
  drop the standby, whose ``streamjob_leader 0`` the no-leader alert reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from streamjob_contract.httpserve import BoundedHandler, BoundedHTTPServer

log = logging.getLogger(__name__)

READINESS_PATH = "/readyz"


class HealthError(ValueError):
    """A --liveness URL that cannot be served."""


def parse_endpoint(url: str) -> tuple[str, int, str]:
    """``http://HOST:PORT/PATH`` -> (host, port, path); raises HealthError naming --liveness.

    HOST may be an IPv6 address with or without brackets: the chart passes ``$(POD_IP)``,
    which Kubernetes gives unbracketed on an IPv6 cluster (as for ``--metrics-address``).
    """
    hostport, slash, rest = url.removeprefix("http://").partition("/")
    host, _, port = hostport.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not url.startswith("http://") or not host or not port.isdigit() or int(port) > 65535:
        raise HealthError(f"--liveness: expected http://HOST:PORT/PATH, e.g. http://0.0.0.0:8080/healthz (got {url!r})")
    path = "/" + rest if slash else "/healthz"
    if path == READINESS_PATH:
        raise HealthError(f"--liveness: {READINESS_PATH} is the readiness path; choose another (got {url!r})")
    return host, int(port), path


class HealthServer:
    def __init__(self, url: str, live: Callable[[], bool], ready: Callable[[], bool]) -> None:
        host, port, self.path = parse_endpoint(url)
        checks = {self.path: live, READINESS_PATH: ready}

        class Handler(BoundedHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    self.send(404, b"not found\n", "text/plain")
                    return
                try:
                    ok = check()
                except Exception as err:  # a check that fails to run is a failing check
                    log.warning("Failed health check path=%s error=%s", self.path, err)
                    ok = False
                self.send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n", "text/plain")

            def log_message(self, *_: object) -> None:  # probes every few seconds: not worth a log line each
                pass

        # the same limits as the driver's control endpoint: the health port is reachable by anyone the
        # pod network lets in, and a client holding connections must not starve the kubelet's probes
        self.server = BoundedHTTPServer((host, port), Handler)
        self.address = f"http://{f'[{host}]' if ':' in host else host}:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="health", daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
