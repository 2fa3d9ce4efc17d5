"""The operator's health endpoints: a --liveness URL that cannot be served is refused naming the flag."""

from __future__ import annotations

import socket
import time

import pytest

from streamjob_operator.health import HealthError, parse_endpoint
from streamjob_operator.main import main


@pytest.mark.parametrize("url, why", [
    pytest.param("127.0.0.1:8080/healthz", "expected http://HOST:PORT/PATH", id="no scheme"),
    pytest.param("https://127.0.0.1:8080/healthz", "expected http://HOST:PORT/PATH", id="https"),
    pytest.param("http://127.0.0.1/healthz", "expected http://HOST:PORT/PATH", id="no port"),
    pytest.param("http://127.0.0.1:8080/readyz", "the readiness path", id="the readiness path"),
])
def test_a_liveness_url_that_cannot_be_served_is_refused(url: str, why: str) -> None:
    with pytest.raises(HealthError, match="--liveness") as err:
        parse_endpoint(url)
    assert why in str(err.value)


@pytest.mark.parametrize("url, parsed", [
    pytest.param("http://10.1.2.3:8080/healthz", ("10.1.2.3", 8080, "/healthz"), id="IPv4 pod IP"),
    pytest.param("http://fd00:10:244::5:8080/healthz", ("fd00:10:244::5", 8080, "/healthz"), id="IPv6 pod IP as the chart passes it"),
    pytest.param("http://[::1]:8080/live", ("::1", 8080, "/live"), id="bracketed IPv6"),
    pytest.param("http://0.0.0.0:8080", ("0.0.0.0", 8080, "/healthz"), id="no path"),
])
def test_liveness_urls_parse_with_ipv4_and_ipv6_hosts(url: str, parsed: tuple[str, int, str]) -> None:
    assert parse_endpoint(url) == parsed


@pytest.mark.parametrize("flag, value", [
    ("--liveness", "http://127.0.0.1:{port}/healthz"),
    ("--metrics-address", "127.0.0.1:{port}"),
])
def test_a_taken_port_names_the_flag_and_the_address(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        value = value.format(port=taken.getsockname()[1])
        with pytest.raises(SystemExit) as exit_:
            main([flag, value, "--no-leader-election"])
    assert exit_.value.code == 2
    assert f"{flag}: cannot listen on {value}" in capsys.readouterr().err


def test_clients_holding_connections_cannot_take_the_probes_threads() -> None:
    """The health port has the control endpoint's bound (streamjob_contract.httpserve): one more is refused at once."""
    import urllib.error
    import urllib.request

    from streamjob_contract.httpserve import MAX_CONNECTIONS
    from streamjob_operator.health import HealthServer

    def probe(url: str) -> int:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as err:
            return err.code

    server = HealthServer("http://127.0.0.1:0/healthz", live=lambda: True, ready=lambda: False)
    server.start()
    held: list[socket.socket] = []
    try:
        assert probe(f"{server.address}/healthz") == 200
        assert probe(f"{server.address}/readyz") == 503
        host, port = server.server.server_address[:2]
        held = [socket.create_connection((str(host), int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
        assert probe(f"{server.address}/healthz") == 503  # the bound's refusal, not the check's answer
        for s in held:
            s.close()
        deadline = time.monotonic() + 15  # the server sees the closes as its threads read EOF
        while (code := probe(f"{server.address}/healthz")) != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert code == 200, "the health endpoint did not serve again once the held connections were closed"
    finally:
        for s in held:
            s.close()
        server.stop()


def test_the_metrics_port_has_the_health_ports_bound() -> None:
    """/metrics is served by streamjob_contract.httpserve too: held connections cannot starve Prometheus's scrape."""
    import urllib.error
    import urllib.request

    from streamjob_contract.httpserve import MAX_CONNECTIONS
    from streamjob_operator import metrics

    server = metrics.serve("127.0.0.1:0")
    host, port = server.server_address[:2]
    url = f"http://{host}:{port}/metrics"
    held: list[socket.socket] = []
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b"streamjob_leader" in response.read()
        held = [socket.create_connection((str(host), int(port)), timeout=10) for _ in range(MAX_CONNECTIONS)]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 503
    finally:
        for s in held:
            s.close()
        server.shutdown()
        server.server_close()
