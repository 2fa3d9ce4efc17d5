"""Shared pytest fixtures: one real test bed per session, admin clients, a fresh namespace per test.

The test bed (kube-apiserver + etcd with RBAC, kube-controller-manager, S3,
the process kubelet) starts on first use and stops at the end of the session.
Its logs are kept, and their folder printed, when a test failed or when
STREAMJOB_KEEP_TESTBED=1. A test that needs it (directly or through a fixture) is
marked ``testbed``, so the fast lane deselects it: ``pytest tests/unit tests/crd -m "not testbed"``.
"""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed
from testbed.waiting import wait_for


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"testbed", "session_bed", "real_bed"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.testbed)


@pytest.fixture(scope="session")
def session_bed(request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """The session's test bed on the process kubelet, for the modules that do not run on the real node."""
    bed = TestBed()
    bed.start()
    yield bed
    keep = request.session.testsfailed > 0 or os.environ.get("STREAMJOB_KEEP_TESTBED") == "1"
    bed.stop(keep=keep)
    if keep:
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        message = f"test bed logs kept in {bed.run_dir} (components: {bed.log_dir}, pods: {bed.kubelet_dir / 'logs'})"
        if reporter is not None:
            reporter.write_line(message)
        else:
            print(message)


@pytest.fixture(scope="module")
def testbed(request: pytest.FixtureRequest) -> TestBed:
    """The module's test bed: the real node (``real_bed``, its own for the module) when the module sets
    ``REAL_NODE = True``, else the session's bed on the process kubelet. Modules move to the real node one at a
    time (docs/testbed.md, "Moving the suite to the real node")."""
    bed: TestBed = request.getfixturevalue("real_bed" if getattr(request.module, "REAL_NODE", False) else "session_bed")
    return bed


@pytest.fixture(scope="module")
def kube_api(testbed: TestBed) -> Iterator[client.ApiClient]:
    """An admin (system:masters) ApiClient for the module's test bed."""
    api = testbed.api_client()
    yield api
    api.close()


@pytest.fixture(scope="module")
def core_v1(kube_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture(scope="module")
def s3(testbed: TestBed) -> Any:
    """A boto3 S3 client for the module's test bed's S3 server."""
    return testbed.s3_client()


@pytest.fixture(scope="session")
def spark_local(session_bed: TestBed) -> Iterator[Any]:
    """One local-mode SparkSession per test session with s3a:// pointed at the test bed's S3.

    Shared because a Python process gets one JVM: confs that shape the JVM
    (the s3a jars on the driver classpath) only count at its first start.
    """
    from pyspark.sql import SparkSession

    from testbed import locate

    locate.require_jars_dir()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # bind to loopback only
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("streamjob-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in session_bed.spark_s3a_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


@pytest.fixture
def namespace(request: pytest.FixtureRequest, core_v1: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace, ready for pods (default ServiceAccount and root CA published), deleted after."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    core_v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: core_v1.read_namespaced_service_account("default", name), 30, f"default ServiceAccount in {name}")
    wait_for(lambda: core_v1.read_namespaced_config_map("kube-root-ca.crt", name), 30, f"kube-root-ca.crt in {name}")
    yield name
    core_v1.delete_namespace(name)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The test bed's Kafka broker (KRaft, one node, loopback), shared by the session; stopped at its end.

    Independent of the Kubernetes test bed: runtime tests need only the broker.
    Start-up is bounded (testbed.kafka.start_kafka raises with the log tail).
    """
    from testbed import locate
    from testbed.kafka import start_kafka

    # a SASL_PLAINTEXT/PLAIN listener beside the plain one, its user's password fresh per session
    users = {"streamjob": secrets.token_urlsafe(18)}
    broker = start_kafka(locate.kafka_dir(), tmp_path_factory.mktemp("kafka"), timeout=180, sasl_users=users)
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def real_bed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """A test bed on the real node (testbed.node), one per module: one real node runs on a machine at a time.

    A module that sets ``REAL_BED_KAFKA = True`` gets the Kafka broker too, reachable from pods (testbed.kafka);
    one that sets ``REAL_BED_NODES = 2`` a second real node (testbed.secondnode)."""
    # no skip: a machine where this cannot run is a failure to see, not a pass
    assert os.geteuid() == 0, "the real node needs root (it creates a bridge, iptables chains, mounts and cgroups)"
    bed = TestBed(tmp_path_factory.mktemp("real-node"), node="real", kafka=getattr(request.module, "REAL_BED_KAFKA", False),
                  nodes=getattr(request.module, "REAL_BED_NODES", 1))
    started = time.monotonic()
    bed.start()
    print(f"real node test bed started in {time.monotonic() - started:.1f}s; node timings {bed.node.timings if bed.node else {}}")
    yield bed
    keep = request.session.testsfailed > 0 or os.environ.get("STREAMJOB_KEEP_TESTBED") == "1"
    bed.stop(keep=keep)
    if keep:
        print(f"real node test bed logs kept in {bed.log_dir}")
