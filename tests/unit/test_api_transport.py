"""The operator's API client: the leader fence runs in the transport, before every write leaves, and no call
goes without a timeout (streamjob_operator.k8s.clients.guard_calls).

Against a real HTTP server on 127.0.0.1 that records what reaches it: a write refused by the fence never
arrives, whichever API call of a pass it is; reads pass the fence by; a server that never answers costs a
call its timeout, not a handler thread.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from streamjob_operator.k8s.clients import fence_kopf_writes, guard_calls, load_api_client


class Server:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.hang = threading.Event()
        self.drop = threading.Event()  # close the connection without an answer, as a reset would
        self.dropped = threading.Event()
        seen, hang, drop, dropped = self.seen, self.hang, self.drop, self.dropped

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                seen.append((self.command, self.path))
                if drop.is_set():
                    dropped.set()
                    self.close_connection = True
                    return
                if hang.is_set():
                    time.sleep(3)
                body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that timed out closed its end: nothing to report

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.hang.clear()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.close()


class Deposed(Exception):
    pass


def api_for(server: Server) -> client.ApiClient:
    conf = client.Configuration()
    conf.host = server.url
    return client.ApiClient(conf)


def test_a_write_refused_by_the_fence_never_reaches_the_server_and_reads_pass(server: Server) -> None:
    leading = {"now": True}

    def fence() -> None:
        if not leading["now"]:
            raise Deposed()

    api = api_for(server)
    guard_calls(api, fence)
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("ns", {"metadata": {"name": "x"}})
    assert server.seen == [("POST", "/api/v1/namespaces/ns/configmaps")]

    leading["now"] = False  # e.g. a replica thawed past its deadline, in the middle of a pass
    writes = [
        lambda: core.create_namespaced_config_map("ns", {"metadata": {"name": "y"}}),
        lambda: core.patch_namespaced_config_map("x", "ns", {"data": {"a": "b"}}),
        lambda: core.replace_namespaced_config_map("x", "ns", {"metadata": {"name": "x"}}),
        lambda: core.delete_namespaced_config_map("x", "ns"),
    ]
    for write in writes:
        with pytest.raises(Deposed):
            write()
    core.read_namespaced_config_map("x", "ns")
    assert server.seen == [("POST", "/api/v1/namespaces/ns/configmaps"), ("GET", "/api/v1/namespaces/ns/configmaps/x")]


def test_every_call_gets_a_timeout_writes_the_lease_margin(server: Server) -> None:
    api = api_for(server)
    guard_calls(api, None, write_timeout=lambda: 0.5)
    core = client.CoreV1Api(api)
    server.hang.set()  # the server takes 3 s to answer: without a timeout the calls below would succeed
    with pytest.raises(Exception) as raised:
        core.delete_namespaced_config_map("x", "ns")
    assert 0.4 < read_timeout(raised.value) <= 0.5, raised.value
    # a call that names its own timeout keeps it
    with pytest.raises(Exception) as raised:
        core.read_namespaced_config_map("x", "ns", _request_timeout=0.3)
    assert 0.2 < read_timeout(raised.value) <= 0.3, raised.value


def read_timeout(err: BaseException) -> float:
    """The read timeout urllib3 names in a timed-out call's error (what is left of the call's timeout)."""
    found = re.search(r"Read timed out. \(read timeout=([0-9.]+)\)", str(err))
    assert found, err
    return float(found.group(1))


def test_a_write_retried_after_a_reset_passes_the_fence_again(server: Server) -> None:
    """urllib3 retries a write whose connection broke; a retry is a new send and must not leave once deposed."""
    def fence() -> None:
        if server.dropped.is_set():  # deposed while the first send was under way
            raise Deposed()

    api = api_for(server)
    guard_calls(api, fence)
    server.drop.set()
    with pytest.raises(Deposed):
        client.CoreV1Api(api).delete_namespaced_config_map("x", "ns")
    assert server.seen == [("DELETE", "/api/v1/namespaces/ns/configmaps/x")]


def test_without_a_fence_a_reset_write_is_retried(server: Server) -> None:
    """The fenced retries keep urllib3's count: a client without leader election retries as before."""
    api = api_for(server)
    guard_calls(api, lambda: None)
    server.drop.set()
    with pytest.raises(Exception):
        client.CoreV1Api(api).delete_namespaced_config_map("x", "ns")
    assert server.seen == [("DELETE", "/api/v1/namespaces/ns/configmaps/x")] * 4


def test_kopf_writes_through_aiohttp_pass_the_same_fence(server: Server) -> None:
    """kopf patches its finalizer and annotations with aiohttp sessions it makes itself."""
    import asyncio

    import aiohttp

    leading = {"now": True}

    def fence() -> None:
        if not leading["now"]:
            raise Deposed()

    async def calls() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.patch(f"{server.url}/apis/streamjob.io/v1alpha1/namespaces/ns/streamjobs/a", json={}):
                pass
            leading["now"] = False
            with pytest.raises(Deposed):
                await session.patch(f"{server.url}/apis/streamjob.io/v1alpha1/namespaces/ns/streamjobs/b", json={})
            async with session.get(f"{server.url}/apis/streamjob.io/v1alpha1/namespaces/ns/streamjobs/c"):
                pass

    undo = fence_kopf_writes(fence)
    try:
        asyncio.run(calls())
    finally:
        undo()
    assert server.seen == [("PATCH", "/apis/streamjob.io/v1alpha1/namespaces/ns/streamjobs/a"),
                           ("GET", "/apis/streamjob.io/v1alpha1/namespaces/ns/streamjobs/c")]


def test_the_connection_pool_holds_a_connection_per_worker(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer pooled connections than handler threads: each request over the pool opened a connection (a TLS
    handshake against a real API server) and dropped it ("Connection pool is full"), on most requests at scale."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "t", "user": {"token": "x"}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
    }))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    assert load_api_client(pool_size=64).rest_client.pool_manager.connection_pool_kw["maxsize"] == 64
    default = load_api_client().rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert load_api_client(pool_size=1).rest_client.pool_manager.connection_pool_kw["maxsize"] == default  # never fewer
