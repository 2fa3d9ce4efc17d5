"""Fixtures for the runtime tests: one deterministic input, its reference outputs, and job processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pause_points
import pytest
import runtime_harness
import runtime_reference as reference
from runtime_harness import S3_BUCKET as BUCKET
from runtime_harness import RuntimeProcess
from runtime_inputs import FILES, SEED, Input, load_generator
from testbed import locate
from testbed.s3 import S3Server, start_s3

from streamjob_contract.jobdef import load_job_definition
from job_runtime.run.runner import Runner
from streamjob_contract.s3 import S3Config
from job_runtime.settings import RuntimeSettings


@pytest.fixture(scope="session")
def events(tmp_path_factory: pytest.TempPathFactory) -> Input:
    """The example input (examples/jobs/gen_events.py), one file per micro-batch."""
    generator = load_generator()
    generated = generator.generate(FILES, SEED)
    directory = tmp_path_factory.mktemp("events")
    generator.write(directory, generated)
    return Input(directory, reference.from_generator(generated))


@pytest.fixture(scope="session")
def jvm_class_archive(events: Input, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A class-data-sharing archive of a real runtime run, so later runtime JVMs start faster.

    Made by one short job over the first two files; if it cannot be made the
    tests run without it (the JVM ignores a missing or unusable archive).
    """
    root = tmp_path_factory.mktemp("jvm-archive")
    archive = root / "runtime.jsa"
    inputs = root / "events"
    inputs.mkdir()
    for path in sorted(events.directory.glob("*.json"))[:2]:
        (inputs / path.name).write_bytes(path.read_bytes())
    job = runtime_harness.example_job("tumbling", inputs, root / "out", root / "job.json")
    proc = RuntimeProcess(root, runtime_harness.run_args(job, (root / "ckpt").as_uri()), label="archive", dump_class_archive=archive)
    proc.start()
    code = proc.wait(600)
    if code != 0 or not archive.exists():
        return None
    runtime_harness.class_archive = archive
    return archive


@pytest.fixture(scope="session")
def pause_jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kill tests' JVM pause hook (tests/runtime/pausepoint/), compiled once per session."""
    return pause_points.build_jar(tmp_path_factory.mktemp("pausepoint"))


@pytest.fixture
def processes(jvm_class_archive: Path | None) -> Iterator[list[RuntimeProcess]]:
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


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    """A Runner of an entrypoint job with a file:// checkpoint in tmp_path/c, not started (no Spark)."""
    job_file = tmp_path / "job.json"
    job_file.write_text('{"entrypoint": "jobs.wordcount:build"}')
    settings = RuntimeSettings(job_file=job_file, name="j", namespace="ns", checkpoint_location=(tmp_path / "c").as_uri(),
                               state_partitions=2, control_address=None)
    return Runner(settings, load_job_definition(job_file), S3Config())
