"""Starts the test bed's Kafka broker: Apache Kafka in KRaft mode, one node, loopback only.

Called by the ``kafka_broker`` pytest fixture (tests/conftest.py), by
``testbed.cluster.TestBed`` when asked for Kafka (``streamjob-testbed up
--kafka``, scripts/dev.sh) and by the Kafka benchmark. The jars are the
official ``org.apache.kafka:kafka_2.13`` and its runtime dependencies from
Maven Central (testbed/build/fetch-kafka.sh, cached by version); the node is
both controller and broker (``process.roles=broker,controller``), its
storage formatted with a fresh cluster id, both listeners on 127.0.0.1 on
free ports. Topics are created through the real admin API (confluent-kafka's
AdminClient).

On the real node (``testbed.node``) pods cannot reach loopback: a third listener,
``PODS`` (SASL_SSL, SCRAM-SHA-512), binds the bridge's address and advertises the
``kafka`` Service's name (``testbed.podnet``), so a pod's client finds the broker by DNS
and kube-proxy, as on a cluster. Its certificate names that Service and is signed by the
test bed's CA (a private CA, as Strimzi's cluster CA is: a client must be given it). Its
SCRAM users are written into the storage at format time (``kafka-storage format
--add-scram``), so they exist before the broker serves.
"""

from __future__ import annotations

import base64
import logging
import re
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.proc import ComponentError, ManagedProcess, free_port, port_is_free, start_with_port_retry, tail

log = logging.getLogger(__name__)

HEAP = "-Xmx512m"
LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def _sasl_settings(sasl_users: Mapping[str, str]) -> dict[str, str]:
    """The SASL_PLAINTEXT listener's PLAIN users: the broker's own JAAS entry lists user_<name>="<password>"."""
    # server.properties unescapes backslashes before the JAAS parser sees the value
    _check_plain_tokens("SASL users", sasl_users)
    users = " ".join(f'user_{name}="{password}"' for name, password in sasl_users.items())
    return {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
    }


@dataclass(frozen=True)
class PodListener:
    """The listener pods reach: bound on `bind_host` (the bridge's address), advertised as
    `advertised_host` (a Service name pods resolve), SCRAM-SHA-512 users name -> password; TLS
    with the PKCS#12 `keystore` (testbed.pki.server_keystore) and its password."""

    bind_host: str
    advertised_host: str
    scram_users: Mapping[str, str]
    keystore: Path
    keystore_password: str

    def __post_init__(self) -> None:
        _check_plain_tokens("pod listener SCRAM users", self.scram_users)


def _check_plain_tokens(what: str, users: Mapping[str, str]) -> None:
    # server.properties and kafka-storage's --add-scram both parse these: keep to plain tokens
    odd = [name for name, password in users.items() if not re.fullmatch(r"[A-Za-z0-9_.-]+", name + password)]
    if odd:
        raise ValueError(f"test bed {what}: names and passwords are letters, digits, '_', '.', '-' ({', '.join(odd)})")


def _pod_listener_settings(listener: PodListener) -> dict[str, str]:
    return {
        "listener.name.pods.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.pods.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.pods.ssl.keystore.type": "PKCS12",
        "listener.name.pods.ssl.keystore.location": str(listener.keystore),
        "listener.name.pods.ssl.keystore.password": listener.keystore_password,
        "listener.name.pods.ssl.key.password": listener.keystore_password,
    }


def _properties(node_dir: Path, broker_port: int, controller_port: int, sasl_port: int | None = None,
                sasl_users: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None,
                pods: tuple[PodListener, int] | None = None) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{broker_port}"
    if sasl_port is not None:
        listeners += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    advertised = listeners
    if pods is not None:
        listener, pod_port = pods
        listeners += f",PODS://{listener.bind_host}:{pod_port}"
        advertised += f",PODS://{listener.advertised_host}:{pod_port}"
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"{listeners},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "PODS:SASL_SSL",
        "log.dirs": str(node_dir / "data"),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # keep everything: the examples' events carry event-time timestamps from 2024, which
        # time-based retention would delete at the next check (every 5 minutes)
        "log.retention.ms": "-1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # the broker's default (15 minutes): a sink asking for more is refused
        "transaction.max.timeout.ms": "900000",
        **(_sasl_settings(sasl_users) if sasl_port is not None and sasl_users else {}),
        **(_pod_listener_settings(pods[0]) if pods is not None else {}),
        **(overrides or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def admin_client(bootstrap: str, *, quiet: bool = False) -> Any:
    """An admin client; `quiet` silences librdkafka's connection errors (the readiness probe's)."""
    from confluent_kafka.admin import AdminClient

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000}
    if quiet:
        conf["log_level"] = 0
    return AdminClient(conf)


@dataclass
class KafkaBroker:
    process: ManagedProcess
    bootstrap: str  # host:port of the PLAINTEXT listener
    log_path: Path
    sasl_bootstrap: str | None = None  # host:port of the SASL_PLAINTEXT (PLAIN) listener, when asked for
    sasl_users: Mapping[str, str] = field(default_factory=dict)  # its users: name -> password
    pod_bootstrap: str | None = None  # host:port pods dial (the PODS listener's advertised address), when asked for
    pod_users: Mapping[str, str] = field(default_factory=dict)  # the PODS listener's SCRAM-SHA-512 users

    def admin(self) -> Any:
        return admin_client(self.bootstrap)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 60.0, **config: str) -> str:
        """Creates `name` through the admin API and waits until it exists; returns the name."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until the futures are done
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)], operation_timeout=timeout
        )
        futures[name].result(timeout=timeout)
        return name

    def stop(self) -> None:
        self.process.stop(timeout=30)

    def restart(self, timeout: float = 180.0) -> None:
        """Starts the stopped broker again: same command, ports and log directory (its topics,
        committed offsets and transactions survive), ready when it serves the protocol."""
        if self.process.alive():
            raise ComponentError(f"kafka broker {self.bootstrap} is still running: stop() it first")
        self.process = ManagedProcess("kafka", self.process.argv, self.log_path)
        _wait_serving(self.process, self.bootstrap, timeout)
        log.info("Restarted Kafka broker bootstrap=%s", self.bootstrap)


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding; never starting with
    "-", which kafka-storage's argument parser takes for an option (as Kafka's own Uuid avoids)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def start_kafka(jars_dir: Path, node_dir: Path, *, timeout: float = 120.0, preferred_port: int | None = None,
                sasl_users: Mapping[str, str] | None = None, settings: Mapping[str, str] | None = None,
                pod_listener: PodListener | None = None, preferred_pods_port: int | None = None) -> KafkaBroker:
    """Formats a fresh KRaft log directory under `node_dir` and starts the node on free ports
    (the broker listener on `preferred_port` when it is free: the dev examples name 127.0.0.1:9092).
    With `sasl_users` (name -> password) it also opens a SASL_PLAINTEXT listener on loopback that
    authenticates them with PLAIN (`KafkaBroker.sasl_bootstrap`); no authorizer, so an authenticated
    user may do anything. `settings` are server.properties entries over the defaults (a test's
    own broker: say, a short offsets.retention.minutes). With `pod_listener` it also opens the
    PODS listener (module docstring; `KafkaBroker.pod_bootstrap`), on `preferred_pods_port` when it is free
    (the dev examples name the kafka Service's port 9093)."""
    java = shutil.which("java")
    if java is None:
        raise ComponentError("java is not on PATH (the Kafka broker needs Java 17)")
    node_dir.mkdir(parents=True, exist_ok=True)
    classpath = f"{jars_dir}/*"
    config = node_dir / "server.properties"
    log_config = node_dir / "log4j2.properties"
    log_config.write_text(LOG4J2)
    log_path = node_dir / "kafka.log"
    chosen: dict[str, int] = {}
    formatted = False

    def start() -> ManagedProcess:
        nonlocal formatted
        first = "broker" not in chosen
        chosen["broker"] = preferred_port if preferred_port and first and port_is_free(preferred_port) else free_port()
        chosen["controller"] = free_port()
        if sasl_users:
            chosen["sasl"] = free_port()
        if pod_listener is not None:
            chosen["pods"] = (preferred_pods_port if preferred_pods_port and first and port_is_free(preferred_pods_port)
                              else free_port())
        pods = (pod_listener, chosen["pods"]) if pod_listener is not None else None
        config.write_text(_properties(node_dir, chosen["broker"], chosen["controller"], chosen.get("sasl"), sasl_users, settings,
                                      pods))
        if not formatted:
            scram = [arg for name, password in (pod_listener.scram_users.items() if pod_listener else ())
                     for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
            done = subprocess.run(
                [java, HEAP, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(config),
                 *scram],
                capture_output=True, text=True, timeout=timeout,
            )
            if done.returncode != 0:
                raise ComponentError(f"kafka storage format failed ({done.returncode}): {done.stdout}{done.stderr}")
            formatted = True
        argv = [java, HEAP, f"-Dlog4j2.configurationFile={log_config}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                "-cp", classpath, "kafka.Kafka", str(config)]
        return ManagedProcess("kafka", argv, log_path)

    def ready(proc: ManagedProcess) -> None:
        _wait_serving(proc, f"127.0.0.1:{chosen['broker']}", timeout)

    proc = start_with_port_retry(start, ready)
    sasl = f"127.0.0.1:{chosen['sasl']}" if "sasl" in chosen else None
    broker = KafkaBroker(proc, f"127.0.0.1:{chosen['broker']}", log_path, sasl, dict(sasl_users or {}),
                         f"{pod_listener.advertised_host}:{chosen['pods']}" if pod_listener else None,
                         dict(pod_listener.scram_users) if pod_listener else {})
    log.info("Started Kafka broker bootstrap=%s saslBootstrap=%s podBootstrap=%s", broker.bootstrap, sasl, broker.pod_bootstrap)
    return broker


def _wait_serving(proc: ManagedProcess, bootstrap: str, timeout: float) -> None:
    def serving() -> bool:
        metadata = admin_client(bootstrap, quiet=True).list_topics(timeout=5)
        return len(metadata.brokers) == 1

    proc.wait_ready(serving, timeout, "serving the Kafka protocol")


def log_tail(broker: KafkaBroker) -> str:
    return tail(broker.log_path)
