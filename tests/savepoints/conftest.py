"""Fixtures for the savepoint tests: the real S3 server alone, one local Spark session,
and one real RocksDB checkpoint made once per session.

Only versitygw is started (through ``testbed.s3.start_s3``), not the whole test bed:
savepoints need S3, not Kubernetes. Spark runs in this process (local[2]); its
session is configured for s3a against the same server when the s3a jars are present.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from job_runtime.s3 import S3Config
from testbed import locate
from testbed.s3 import S3Server, start_s3
from testbed.spark import s3a_conf

from savepoint_helpers import BUCKET, ROCKSDB, STATE_PARTITIONS, RealCheckpoint, run_to_end, write_input


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    root = tmp_path_factory.mktemp("s3")
    server = start_s3(
        locate.bin_dir() / "versitygw", data_dir=root / "data", log_path=root / "versitygw.log", buckets=(BUCKET,)
    )
    yield server
    server.process.stop()


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
def spark(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("streamjob-savepoint-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(STATE_PARTITIONS))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "2s")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .config("spark.driver.memory", "1g")
    )
    for key, value in s3a_conf(s3_server.credentials, locate.jars_dir()).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def real_checkpoint(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> RealCheckpoint:
    """A checkpoint of 4 committed batches (0..3), one input file each. Treat as read-only."""
    root = tmp_path_factory.mktemp("real-checkpoint")
    input_dir = root / "input"
    files = 4
    for index in range(files):
        write_input(input_dir, index)
    checkpoint = root / "checkpoint"
    run_to_end(spark, input_dir, f"file://{checkpoint}")
    return RealCheckpoint(checkpoint, input_dir, files)
