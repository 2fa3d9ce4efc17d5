"""Shared pytest fixtures: the real-node test bed, admin clients, a fresh namespace per test.

The test bed (kube-apiserver + etcd with RBAC, kube-controller-manager, S3, and a real node: containerd, kubelet,
kube-proxy, kube-scheduler, CoreDNS; testbed.node) starts on first use and stops at the end of the session. One
real node runs on a machine at a time, so a module that needs a bed of its own (a broker reachable from pods, a
second node, a node it stops or crashes, dev.sh's bed) says so with ``OWN_BED = True`` (``REAL_BED_KAFKA`` and
``REAL_BED_NODES = 2`` imply it) and runs before the shared bed starts: collection puts those modules first.
Logs are kept, and their folder printed, when a test failed or when STREAMJOB_KEEP_TESTBED=1. A test that needs a
bed (directly or through a fixture), or lives in tests/bed or tests/e2e, is marked ``testbed``, so the fast lane
deselects it: ``pytest tests/unit tests/crd -m "not testbed"``. The full run (scripts/test.sh) runs the two halves side
by side, ``-m testbed`` and ``-m "not testbed"``: only the first holds the machine's real node.
"""

from __future__ import annotations

import os
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed, imagestore
from testbed.waiting import wait_for

BED_FIXTURES = {"testbed", "session_bed", "real_bed"}


def own_bed(module: ModuleType | None) -> bool:
    """Whether a test module runs on a test bed of its own rather than the session's."""
    return bool(getattr(module, "OWN_BED", False) or getattr(module, "REAL_BED_KAFKA", False)
                or getattr(module, "REAL_BED_NODES", 1) != 1)


# the folders whose every test belongs with the machine's one real node: they start the bed or parts of it without
# the bed fixtures (dev.sh, the node's components alone), or are about it
BED_FOLDERS = {"bed", "e2e"}


def needs_bed(item: pytest.Item) -> bool:
    """Whether a test needs the machine's one test bed: it uses a bed fixture, or it lives in a bed folder."""
    if BED_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    parts = item.path.relative_to(item.config.rootpath).parts
    return len(parts) > 2 and parts[0] == "tests" and parts[1] in BED_FOLDERS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if needs_bed(item):
            item.add_marker(pytest.mark.testbed)
    # the modules with a bed of their own first, each module's tests kept together and in order: the session's bed
    # holds the machine's one real node from its first use to the end
    items.sort(key=lambda item: not own_bed(getattr(item, "module", None)))


def start_bed(run_dir: Path, **options: Any) -> TestBed:
    """A started real-node test bed; the development image names (``imagestore.DEV_TAGS``) are tags of the built
    runtime image in its node's store when that image was built."""
    # no skip: a machine where this cannot run is a failure to see, not a pass
    assert os.geteuid() == 0, "the real node needs root (it creates a bridge, iptables chains, mounts and cgroups)"
    bed = TestBed(run_dir, **options)
    started = time.monotonic()
    bed.start()
    print(f"real node test bed started in {time.monotonic() - started:.1f}s; node timings {bed.node.timings if bed.node else {}}")
    if imagestore.inspect(imagestore.runtime_image()) is not None:
        bed.tag_runtime_image(*imagestore.DEV_TAGS)
    return bed


def stop_bed(bed: TestBed, request: pytest.FixtureRequest) -> None:
    keep = request.session.testsfailed > 0 or os.environ.get("STREAMJOB_KEEP_TESTBED") == "1"
    bed.stop(keep=keep)
    if keep:
        message = f"test bed logs kept in {bed.log_dir} (the node's pod logs go with its sweep: read them through the API)"
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(message)
        else:
            print(message)


@pytest.fixture(scope="session")
def session_bed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """The session's test bed, shared by every module without a bed of its own."""
    bed = start_bed(tmp_path_factory.mktemp("session-bed"))
    yield bed
    stop_bed(bed, request)


@pytest.fixture(scope="module")
def real_bed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """A test bed of the module's own (``OWN_BED``). A module that sets ``REAL_BED_KAFKA = True`` gets the Kafka
    broker too, reachable from pods (testbed.kafka); one that sets ``REAL_BED_NODES = 2`` a second real node
    (testbed.secondnode)."""
    assert own_bed(request.module), f"{request.module.__name__} uses its own bed: set OWN_BED = True (tests/conftest.py)"
    bed = start_bed(tmp_path_factory.mktemp("real-node"), kafka=getattr(request.module, "REAL_BED_KAFKA", False),
                    nodes=getattr(request.module, "REAL_BED_NODES", 1))
    yield bed
    stop_bed(bed, request)


@pytest.fixture(scope="module")
def testbed(request: pytest.FixtureRequest) -> TestBed:
    """The module's test bed: its own (``real_bed``) when it asks for one, else the session's."""
    bed: TestBed = request.getfixturevalue("real_bed" if own_bed(request.module) else "session_bed")
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
