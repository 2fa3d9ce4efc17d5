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
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import uuid
from dataclasses import dataclass
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


def _properties(node_dir: Path, broker_port: int, controller_port: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
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


def cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def start_kafka(jars_dir: Path, node_dir: Path, *, timeout: float = 120.0, preferred_port: int | None = None) -> KafkaBroker:
    """Formats a fresh KRaft log directory under `node_dir` and starts the node on free ports
    (the broker listener on `preferred_port` when it is free: the dev examples name 127.0.0.1:9092)."""
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
        config.write_text(_properties(node_dir, chosen["broker"], chosen["controller"]))
        if not formatted:
            done = subprocess.run(
                [java, HEAP, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(config)],
                capture_output=True, text=True, timeout=timeout,
            )
            if done.returncode != 0:
                raise ComponentError(f"kafka storage format failed ({done.returncode}): {done.stdout}{done.stderr}")
            formatted = True
        argv = [java, HEAP, f"-Dlog4j2.configurationFile={log_config}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
                "-cp", classpath, "kafka.Kafka", str(config)]
        return ManagedProcess("kafka", argv, log_path)

    def ready(proc: ManagedProcess) -> None:
        bootstrap = f"127.0.0.1:{chosen['broker']}"

        def serving() -> bool:
            metadata = admin_client(bootstrap, quiet=True).list_topics(timeout=5)
            return len(metadata.brokers) == 1

        proc.wait_ready(serving, timeout, "serving the Kafka protocol")

    proc = start_with_port_retry(start, ready)
    broker = KafkaBroker(proc, f"127.0.0.1:{chosen['broker']}", log_path)
    log.info("Started Kafka broker bootstrap=%s", broker.bootstrap)
    return broker


def log_tail(broker: KafkaBroker) -> str:
    return tail(broker.log_path)
