"""Fixtures for the savepoint tests: the real S3 server alone, one local Spark session,
and one real RocksDB checkpoint made once per session.

S3 is the session test bed's server; Spark is the suite's one local session
(``spark_local``), because a pytest process gets one JVM and the s3a endpoint
is fixed when it starts.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamjob_contract.s3 import S3Config
from testbed.s3 import S3Server
from testbed.waiting import wait_for

from savepoint_helpers import BUCKET, ROCKSDB, STATE_PARTITIONS, RealCheckpoint, run_to_end, write_input


@pytest.fixture(scope="session")
def s3_server(session_bed: Any) -> S3Server:
    """The session test bed's S3 server, with the savepoint tests' bucket.

    Shared with the rest of the suite: one pytest process has one JVM, so the
    Spark session (and its s3a endpoint) must be the same for every test.
    """
    assert session_bed.s3 is not None
    server = S3Server(process=None, credentials=session_bed.s3)  # type: ignore[arg-type]
    client = session_bed.s3_client()
    if BUCKET not in {b["Name"] for b in client.list_buckets().get("Buckets", [])}:
        client.create_bucket(Bucket=BUCKET)
    return server


@pytest.fixture(scope="session")
def s3_config(s3_server: S3Server) -> S3Config:
    c = s3_server.credentials
    return S3Config(
        endpoint_url=c.endpoint, region=c.region, path_style=True, access_key_id=c.access_key, secret_access_key=c.secret_key
    )


@pytest.fixture(scope="session")
def s3_client(s3_config: S3Config) -> Any:
    return s3_config.client()


@pytest.fixture
def s3_prefix() -> str:
    """A fresh ``s3://savepoints/<unique>`` prefix per test."""
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark(spark_local: Any, s3_server: S3Server) -> Iterator[Any]:
    """The suite's one local SparkSession, with the SQL confs these tests need.

    These confs are settable on a running session; the JVM-level ones (the
    s3a jars on the classpath, the endpoint) come from `spark_local`.
    """
    confs = {
        "spark.sql.shuffle.partitions": str(STATE_PARTITIONS),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
        "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
    }
    previous = {key: spark_local.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark_local.conf.set(key, value)
    spark_local.sparkContext.setLogLevel("ERROR")
    yield spark_local
    for key, value in previous.items():
        if value is None:
            spark_local.conf.unset(key)
        else:
            spark_local.conf.set(key, value)


@pytest.fixture(scope="session")
def real_checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> RealCheckpoint:
    """A checkpoint of 4 committed batches (0..3), one input file each. Treat as read-only."""
    root = tmp_path_factory.mktemp("real-checkpoint")
    input_dir = root / "input"
    files = 4
    for index in range(files):
        write_input(input_dir, index)
    written, checkpoint = root / "written", root / "checkpoint"
    run_to_end(spark, input_dir, f"file://{written}")
    settled_copy(written, checkpoint)
    return RealCheckpoint(checkpoint, input_dir, files)


def listing(root: Path) -> list[tuple[str, int, int]]:
    return sorted((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file())


def settled_copy(source: Path, target: Path, quiet: float = 6.0, limit: float = 180.0) -> None:
    """Copies a finished query's checkpoint once Spark has stopped writing to it.

    After the query ends, the state store's maintenance thread (every 2 s here)
    still uploads snapshots for a moment (``.4.zip.<uuid>.tmp``, then ``4.zip``).
    A test copying the checkpoint then got a temporary file, the kind a killed
    driver leaves, and recovery rightly deleted it (seen once in a fresh-clone
    run). The copy is made after `quiet` seconds without a change or a temporary
    file, and kept only when the source did not change while it was made.
    """
    seen = {"listing": None, "since": time.monotonic()}

    def copied() -> bool:
        try:
            now = listing(source)
            if now != seen["listing"] or any(name.endswith((".tmp", ".tmp.crc")) for name, _, _ in now):
                seen.update(listing=now, since=time.monotonic())
                return False
            if time.monotonic() - seen["since"] < quiet:
                return False
            shutil.copytree(source, target)
            if listing(source) == now and [e[:2] for e in listing(target)] == [e[:2] for e in now]:
                return True
        except (FileNotFoundError, shutil.Error):  # a file renamed or removed while listed or copied
            seen.update(listing=None, since=time.monotonic())
        shutil.rmtree(target, ignore_errors=True)
        return False

    wait_for(copied, limit, f"{source} to stop changing, then a copy of it")
