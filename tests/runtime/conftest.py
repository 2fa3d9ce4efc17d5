"""Fixtures for the runtime tests: one deterministic input, its reference outputs, and job processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import runtime_reference as reference
from runtime_harness import S3_BUCKET as BUCKET
from runtime_harness import RuntimeProcess
from runtime_inputs import FILES, SEED, Input, load_generator
from testbed import locate
from testbed.s3 import S3Server, start_s3



@pytest.fixture(scope="session")
def events(tmp_path_factory: pytest.TempPathFactory) -> Input:
    """The example input (examples/jobs/gen_events.py), one file per micro-batch."""
    generator = load_generator()
    generated = generator.generate(FILES, SEED)
    directory = tmp_path_factory.mktemp("events")
    generator.write(directory, generated)
    return Input(directory, reference.from_generator(generated))


@pytest.fixture
def processes() -> Iterator[list[RuntimeProcess]]:
    """Collects the test's runtime processes and kills any left running at the end."""
    started: list[RuntimeProcess] = []
    yield started
    for proc in started:
        proc.kill()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """The test bed's S3 server (versitygw) alone, with one bucket; no Kubernetes needed here."""
    root = tmp_path_factory.mktemp("runtime-s3")
    server = start_s3(locate.bin_dir() / "versitygw", data_dir=root / "data", log_path=root / "versitygw.log", buckets=(BUCKET,))
    yield server
    server.process.stop()
