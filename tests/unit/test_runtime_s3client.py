"""One S3 client per driver process (job_runtime.s3client): built once, shared by every caller and thread,
and the one the runtime's start-up steps use (job_runtime.main builds the Runner with it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from job_runtime import main
from job_runtime.s3client import SharedS3Config
from streamjob_contract import checkpoint
from streamjob_contract.s3 import S3Config


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each client S3Config builds (no boto3: a fresh object per build)."""
    built: list[object] = []

    def client(self: S3Config) -> object:
        built.append(object())
        return built[-1]

    monkeypatch.setattr(S3Config, "client", client)
    return built


def test_the_client_is_built_once_for_every_caller_and_thread(builds: list[object]) -> None:
    config = SharedS3Config(endpoint_url="http://s3:9000")
    barrier = threading.Barrier(8)
    got: list[object] = []

    def first_call() -> None:
        barrier.wait()
        got.append(config.client())

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(builds) == 1
    assert got == builds * 8
    # what the start-up steps open their stores with (streamjob_contract.checkpoint.open_store)
    assert checkpoint.open_store("s3a://b/ck/run-3", config).s3 is builds[0]
    assert checkpoint.open_store("s3a://b/ck/run-3", config).s3 is builds[0]


def test_a_plain_config_still_builds_a_client_per_call(builds: list[object]) -> None:
    config = S3Config(endpoint_url="http://s3:9000")
    assert config.client() is not config.client()
    assert len(builds) == 2


def test_another_config_has_its_own_client(builds: list[object]) -> None:
    a = SharedS3Config(endpoint_url="http://s3:9000")
    b = SharedS3Config(endpoint_url="http://other:9000")
    assert a.client() is not b.client()
    assert a == SharedS3Config(endpoint_url="http://s3:9000") and hash(a) == hash(SharedS3Config(endpoint_url="http://s3:9000"))
    assert "_clients" not in repr(a)


def test_the_runner_gets_the_shared_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job.json"
    job.write_text('{"pipeline": {"sources": [{"name": "t", "kind": "rate"}], "sink": {"kind": "console"}}}')
    given: list[Any] = []

    class Runner:
        final_savepoint = None
        last_error = None
        state = type("S", (), {"value": "STOPPED"})()

        def __init__(self, _settings: Any, _job: Any, s3_config: Any) -> None:
            given.append(s3_config)

        def on_signal(self, *_: Any) -> None:
            pass

        def run(self) -> int:
            return 0

    monkeypatch.setattr("job_runtime.run.runner.Runner", Runner)
    monkeypatch.setattr(main.signal, "signal", lambda *_: None)  # run() ignores SIGINT at its end: not pytest's
    args = main.build_parser().parse_args(["run", "--job", str(job), "--name", "wc", "--namespace", "ns", "--checkpoint",
                                           (tmp_path / "ck").as_uri(), "--state-partitions", "2", "--control-address", ""])
    assert main.run(args) == 0
    assert len(given) == 1 and isinstance(given[0], SharedS3Config)
