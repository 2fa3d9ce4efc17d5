"""The operator's health endpoints: a --liveness URL that cannot be served is refused naming the flag."""

from __future__ import annotations

import socket

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


def test_a_taken_port_names_the_flag_and_the_address(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        url = f"http://127.0.0.1:{taken.getsockname()[1]}/healthz"
        with pytest.raises(SystemExit) as exit_:
            main(["--liveness", url, "--no-leader-election"])
    assert exit_.value.code == 2
    assert f"--liveness: cannot listen on {url}" in capsys.readouterr().err
