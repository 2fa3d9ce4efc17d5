"""The operator's S3 calls on a tenant's endpoint: bounded in time, and never signed with the operator's identity by default.

Real sockets on loopback, no mocks of boto3: an endpoint that accepts TCP and never
answers (a listening socket nobody reads), and one that lists an empty bucket to every
request and records the Authorization header it was sent. Before S3Limits the operator's
client used botocore's defaults (60 s connect, 60 s read): the blackholed call took
two minutes; and a job without credentialsSecret was signed with whatever identity the
operator's environment held.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from streamjob_contract.checkpoint import latest_completed_batch
from streamjob_contract.savepoints import inspect_savepoint
from streamjob_operator.api.spec import StreamJobSpec, parse_spec
from streamjob_operator.k8s.clients import Clients, S3Limits, S3Unresponsive

OPERATOR_KEY = "AKIAOPERATOROWNKEY01"
LIMITS = S3Limits(connect_timeout_seconds=0.5, read_timeout_seconds=1.0, max_attempts=2, unresponsive_seconds=60)


def job_spec(endpoint: str) -> StreamJobSpec:
    return parse_spec({
        "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
        "job": {"entrypoint": "jobs.wordcount:build"},
        "checkpoint": {"location": "s3a://tenant/checkpoints/wc"},
        "savepoint": {"location": "s3://tenant/savepoints"},
        "s3": {"endpoint": endpoint, "pathStyleAccess": True},  # no credentialsSecret
    })


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An endpoint that completes the TCP handshake (the kernel's backlog) and never sends a byte."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[str]]]:
    """An endpoint listing an empty bucket to every request, recording its Authorization header ("" when unsigned)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.headers.get("Authorization") or "")
            body = (b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                    b"<Name>tenant</Name><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated></ListBucketResult>")
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _answer

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_blackholed_endpoint_costs_one_bounded_wait_then_none(blackhole: str) -> None:
    clients = Clients(api=None, s3_limits=LIMITS)  # type: ignore[arg-type]  # S3 only: no API server needed
    config = clients.s3_config("tenant", job_spec(blackhole))

    started = time.monotonic()
    with pytest.raises(Exception) as first:
        clients.s3_call(config, lambda: latest_completed_batch("s3://tenant/checkpoints/wc", s3=config))
    took = time.monotonic() - started
    assert "timeout" in type(first.value).__name__.lower() or "timed out" in str(first.value), repr(first.value)
    # + 2 s for making the client on a loaded machine; botocore's defaults would wait 60 s per attempt, 3 attempts
    assert took < LIMITS.worst_case_seconds() + 2, f"the call took {took:.1f}s; the bound is {LIMITS.worst_case_seconds()}s"

    # the next job on that endpoint does not wait again
    started = time.monotonic()
    with pytest.raises(S3Unresponsive, match="did not answer"):
        clients.s3_call(config, lambda: inspect_savepoint("s3://tenant/savepoints/sp-1", s3_config=config))
    assert time.monotonic() - started < 0.5


def test_a_job_without_credentials_secret_is_not_lent_the_operators_identity(
    recorder: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, seen = recorder
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", OPERATOR_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-own-secret-key")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    default = Clients(api=None, s3_limits=LIMITS)  # type: ignore[arg-type]
    config = default.s3_config("tenant", job_spec(endpoint))
    assert default.s3_call(config, lambda: latest_completed_batch("s3://tenant/checkpoints/wc", s3=config)) is None
    assert seen and all(header == "" for header in seen), seen  # unsigned: no identity at all

    seen.clear()
    opted_in = Clients(api=None, s3_limits=S3Limits(connect_timeout_seconds=0.5, read_timeout_seconds=1.0, ambient_credentials=True))  # type: ignore[arg-type]
    config = opted_in.s3_config("tenant", job_spec(endpoint))
    assert opted_in.s3_call(config, lambda: latest_completed_batch("s3://tenant/checkpoints/wc", s3=config)) is None
    assert seen and all(OPERATOR_KEY in header for header in seen), seen  # the chart's opt-in: the operator's own key


def test_after_the_pause_one_call_tries_the_endpoint_again_and_the_others_skip_it_meanwhile(blackhole: str) -> None:
    # many jobs on one dead endpoint: when its pause ends, their passes must not all wait on it at once
    limits = S3Limits(connect_timeout_seconds=0.5, read_timeout_seconds=1.0, max_attempts=1, unresponsive_seconds=0.3)
    clients = Clients(api=None, s3_limits=limits)  # type: ignore[arg-type]
    config = clients.s3_config("tenant", job_spec(blackhole))

    def read() -> int | None:
        return latest_completed_batch("s3://tenant/checkpoints/wc", s3=config)

    with pytest.raises(Exception):
        clients.s3_call(config, read)  # the endpoint times out: paused
    time.sleep(limits.unresponsive_seconds)

    entered, probed = threading.Event(), []

    def probe() -> int | None:
        entered.set()
        return read()

    def run_probe() -> None:
        try:
            clients.s3_call(config, probe)
        except Exception as err:
            probed.append(err)

    thread = threading.Thread(target=run_probe)
    thread.start()
    assert entered.wait(10)
    started = time.monotonic()
    with pytest.raises(S3Unresponsive):  # before: this call went to the endpoint too, and waited out its timeouts
        clients.s3_call(config, read)
    assert time.monotonic() - started < 0.5
    thread.join(10)
    assert probed and not isinstance(probed[0], S3Unresponsive), probed  # the probe itself waited, and timed out
    with pytest.raises(S3Unresponsive):  # paused again
        clients.s3_call(config, read)
