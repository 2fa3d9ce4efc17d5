"""Truth tables for the kubelet's pure parts: $(VAR) expansion, env resolution, the image table."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.kubelet import env as envmod
from testbed.kubelet import images

ENV = {"A": "alpha", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("$(A)", "alpha", id="defined"),
        pytest.param("x-$(A)-y", "x-alpha-y", id="inside-text"),
        pytest.param("$(EMPTY)", "", id="defined-empty"),
        pytest.param("$(MISSING)", "$(MISSING)", id="undefined-kept"),
        pytest.param("$$(A)", "$(A)", id="escaped"),
        pytest.param("$$$(A)", "$alpha", id="escaped-dollar-then-ref"),
        pytest.param("$A", "$A", id="shell-style-untouched"),
        pytest.param("$(A", "$(A", id="unclosed"),
        pytest.param("cost $", "cost $", id="trailing-dollar"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert envmod.expand(text, ENV) == expected


def test_container_env_orders_env_from_then_env_and_refers_back() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {"nodeName": "n"}, "status": {"podIP": "127.0.0.12"}}
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "URL", "value": "http://$(IP):$(CM_PORT)/$(NOPE)"},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    }
    result = envmod.container_env(
        pod, container,
        service_env={"KUBERNETES_SERVICE_HOST": "127.0.0.1"},
        get_config_map=lambda name: {"metadata": {"namespace": "ns"}, "data": {"PORT": "8080"}} if name == "cm" else None,
        get_secret=lambda name: {"metadata": {"namespace": "ns"}, "data": {"k": "cHc="}},
        node_allocatable={},
    )
    assert result["URL"] == "http://127.0.0.12:8080/$(NOPE)"
    assert result["PASS"] == "pw"
    assert result["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"


def test_missing_secret_is_a_config_error_naming_it() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]}
    with pytest.raises(envmod.ConfigError, match='secret "absent" not found'):
        envmod.container_env({"metadata": {}}, container, service_env={}, get_config_map=lambda n: None,
                             get_secret=lambda n: None, node_allocatable={})


SPARK = images.Environment(venv_bin=Path("/venv/bin"), spark_home=Path("/venv/site/pyspark"), jars_dir=Path("/jars"))


@pytest.mark.parametrize(
    ("image", "command", "args", "env", "expected"),
    [
        pytest.param("ghcr.io/streamjob/streamjob-runtime:0.1.0", ["/opt/spark/bin/spark-submit"], ["app.py"], {},
                     ["/venv/site/pyspark/bin/spark-submit", "app.py"], id="runtime-spark-submit"),
        pytest.param("streamjob-runtime:dev", [], ["driver", "app.py"], {"SPARK_DRIVER_BIND_ADDRESS": "127.0.0.9"},
                     ["/venv/site/pyspark/bin/spark-submit", "--conf", "spark.driver.bindAddress=127.0.0.9", "--deploy-mode", "client", "app.py"],
                     id="runtime-entrypoint-driver"),
        pytest.param("busybox:1.36", ["sh", "-c", "true"], [], {}, ["sh", "-c", "true"], id="busybox-command"),
        pytest.param("docker.io/library/python:3.11-slim", [], [], {}, ["python3"], id="python-default-cmd"),
    ],
)
def test_image_argv(image: str, command: list[str], args: list[str], env: dict[str, str], expected: list[str]) -> None:
    resolved = images.lookup(image, SPARK)
    assert resolved.argv(command, args, resolved.container_env(env)) == expected


def test_runtime_executor_is_spark_entrypoint_executor() -> None:
    resolved = images.lookup("ghcr.io/streamjob/streamjob-runtime:0.1.0", SPARK)
    env = resolved.container_env({
        "SPARK_EXECUTOR_MEMORY": "512m", "SPARK_DRIVER_URL": "spark://d", "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1", "SPARK_APPLICATION_ID": "app", "SPARK_EXECUTOR_POD_IP": "127.0.0.20",
        "SPARK_RESOURCE_PROFILE_ID": "0", "SPARK_EXECUTOR_POD_NAME": "exec-1", "SPARK_CONF_DIR": "/opt/spark/conf",
        "SPARK_JAVA_OPT_10": "-Dten", "SPARK_JAVA_OPT_2": "-Dtwo",
    })
    argv = resolved.argv([], ["executor"], env)
    assert argv[1:5] == ["-Dtwo", "-Dten", "-Xms512m", "-Xmx512m"]
    assert argv[6] == "/opt/spark/conf::/venv/site/pyspark/jars/*:/jars/*"
    assert argv[7:] == [
        "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend", "--driver-url", "spark://d",
        "--executor-id", "1", "--cores", "1", "--app-id", "app", "--hostname", "127.0.0.20",
        "--resourceProfileId", "0", "--podName", "exec-1",
    ]


def test_unknown_image_is_not_found_naming_it() -> None:
    with pytest.raises(images.ImageNotFound, match="quay.io/acme/thing:2"):
        images.lookup("quay.io/acme/thing:2", SPARK)


def test_address_pool_hands_out_distinct_loopback_addresses_and_skips_busy_ones() -> None:
    import ipaddress
    import socket

    from testbed.kubelet.ipam import AddressPool

    start = int(ipaddress.IPv4Address("127.0.7.10"))
    with socket.socket() as listener:
        listener.bind(("127.0.7.10", 0))
        listener.listen()
        pool = AddressPool(start=start)
        first, second = pool.allocate("a"), pool.allocate("b")
    assert (first, second) == ("127.0.7.11", "127.0.7.12")
    assert pool.allocate("a") == first
    pool.release("a")
    assert pool.allocate("c") == "127.0.7.13"
