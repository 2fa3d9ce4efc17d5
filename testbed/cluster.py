"""The test bed as one object: start every real component on loopback, expose how to reach them, stop.

Called by ``tests/conftest.py`` (the session's test bed, and a module's own) and by
``testbed.cli`` (``streamjob-testbed up``). Components, in start order: etcd,
kube-apiserver (RBAC on), kube-controller-manager, versitygw (S3), Kafka
(KRaft, when asked for), then the node: a real one (``testbed.node``: containerd, kubelet, kube-proxy,
kube-scheduler, CoreDNS on a bridge inside this machine; the API server and S3 bind to the bridge's address,
where pods reach them, and host clients dial its loopback alias: ``testbed.podnet``), and with ``nodes=2`` a
second (``testbed.secondnode``).
Everything lives in one run directory (certs, kubeconfigs, data, logs), kept when something fails.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes import client, config

from testbed import kubeconfig as kubeconfig_file
from testbed import imagestore, locate, pki, podnet, spark
from testbed.kafka import KafkaBroker, PodListener, start_kafka
from testbed.control_plane import start_apiserver, start_controller_manager, start_etcd
from testbed.node import BRIDGE_IP, NodeError, RealNode
from testbed.secondnode import SecondNode
from testbed.proc import ComponentError, ManagedProcess, tail
from testbed.s3 import S3Credentials, start_s3
from testbed.s3 import client as s3_client

log = logging.getLogger(__name__)

NODE_NAME = "testbed-node"
DEFAULT_BUCKETS = ("streamjob",)
KAFKA_POD_USER = "streamjob"  # the SCRAM-SHA-512 user of the broker's PODS listener (real node)


class TestBedError(RuntimeError):
    """The test bed could not start; the message names the component and shows its log."""

    __test__ = False  # not a pytest test class


class TestBed:
    """A running test bed. Use as a context manager, or ``start()`` / ``stop()``."""

    __test__ = False

    def __init__(
        self,
        run_dir: Path | None = None,
        *,
        buckets: tuple[str, ...] = DEFAULT_BUCKETS,
        node_name: str = NODE_NAME,
        s3_port: int | None = None,
        kafka: bool = False,
        kafka_port: int | None = None,
        kafka_pods_port: int | None = None,
        kafka_topics: tuple[str, ...] = (),
        nodes: int = 1,
    ) -> None:
        if nodes not in (1, 2):
            raise ValueError(f"nodes must be 1, or 2 (a second real node, testbed.secondnode), not {nodes}")
        self.node: RealNode | None = None  # set by start()
        # the second real node (nodes=2): named f"{node_name}-2", started once the first is Ready
        self.second_node: SecondNode | None = None
        self.nodes = nodes
        self.s3_port = s3_port
        self.with_kafka = kafka
        self.kafka_port = kafka_port
        self.kafka_pods_port = kafka_pods_port  # preferred port of the PODS listener (real node), as kafka_port
        self.kafka_topics = kafka_topics
        self.kafka: KafkaBroker | None = None
        self.run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="streamjob-testbed-"))
        self.buckets = buckets
        self.node_name = node_name
        self.log_dir = self.run_dir / "logs"
        self.kubeconfig = self.run_dir / "kubeconfig"
        # JSON lines, one per request of a service account (testbed.control_plane.AUDIT_POLICY)
        self.audit_log = self.log_dir / "audit.jsonl"
        self.ca_file = self.run_dir / "pki" / "ca.crt"
        self.api_url = ""
        self.apiserver_port = 0
        self.s3: S3Credentials | None = None
        self.jars_dir: Path | None = None
        self._processes: list[ManagedProcess] = []

    # --- lifecycle -------------------------------------------------------------
    def __enter__(self) -> TestBed:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop(keep=exc is not None)

    def start(self, timeout: float = 180.0) -> TestBed:
        started = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start_all(timeout)
        except BaseException as exc:
            self.stop(keep=True)
            if isinstance(exc, (ComponentError, locate.MissingToolError, NodeError)):
                raise TestBedError(f"{exc}\n(test bed logs kept in {self.log_dir})") from exc
            raise
        log.info("Started test bed run_dir=%s seconds=%.1f", self.run_dir, time.monotonic() - started)
        return self

    def _start_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        bins = locate.bin_dir()
        self.jars_dir = locate.jars_dir()
        # first: the machine's node lock (a second test bed stops here, having changed
        # nothing), the sweep of a crashed run's leftovers, the bridge the API server binds to
        self.node = RealNode(self.log_dir, self.node_name)
        self.node.claim()
        certs = pki.generate(self.run_dir / "pki", node_name=self.node_name, extra_sans=(BRIDGE_IP, podnet.HOST_ALIAS))

        etcd = start_etcd(bins / "etcd", self.run_dir / "etcd", self.log_dir / "etcd.log")
        self._processes.append(etcd.process)

        apiserver = start_apiserver(
            bins / "kube-apiserver",
            etcd_url=etcd.url,
            pki=certs,
            work_dir=self.run_dir / "apiserver",
            log_path=self.log_dir / "kube-apiserver.log",
            audit_log=self.audit_log,
            bind_address=BRIDGE_IP,
        )
        self._processes.append(apiserver.process)
        # host clients dial the loopback alias of the bridge's address, never the bridge itself (testbed.podnet)
        self.api_url = apiserver.url.replace(BRIDGE_IP, podnet.HOST_ALIAS)
        self.apiserver_port = apiserver.port

        kubeconfig_file.write(self.kubeconfig, server=self.api_url, ca_file=certs.ca.cert, client=certs.admin, user="streamjob-admin")
        kcm_config = kubeconfig_file.write(
            self.run_dir / "controller-manager.kubeconfig",
            server=self.api_url, ca_file=certs.ca.cert, client=certs.controller_manager, user="system:kube-controller-manager",
        )

        kcm = start_controller_manager(
            bins / "kube-controller-manager",
            kubeconfig=kcm_config,
            pki=certs,
            work_dir=self.run_dir / "controller-manager",
            log_path=self.log_dir / "kube-controller-manager.log",
        )
        self._processes.append(kcm)

        s3 = start_s3(bins / "versitygw", data_dir=self.run_dir / "s3", log_path=self.log_dir / "s3.log", buckets=self.buckets,
                      preferred_port=self.s3_port, bind_host=BRIDGE_IP, client_host=podnet.HOST_ALIAS)
        self._processes.append(s3.process)
        self.s3 = s3.credentials

        if self.with_kafka:
            # pods reach the broker too: the PODS listener, TLS with a cert of the run's CA, one SCRAM user,
            # passwords fresh per test bed
            store_password = secrets.token_hex(16)
            keystore = pki.server_keystore(self.run_dir / "pki", certs.ca, "kafka-pods", (podnet.kafka_host(),), store_password)
            pods = PodListener(BRIDGE_IP, podnet.kafka_host(), {KAFKA_POD_USER: secrets.token_hex(16)}, keystore, store_password)
            self.kafka = start_kafka(locate.kafka_dir(), self.run_dir / "kafka", preferred_port=self.kafka_port,
                                     pod_listener=pods, preferred_pods_port=self.kafka_pods_port)
            self._processes.append(self.kafka.process)
            for topic in self.kafka_topics:
                self.kafka.create_topic(topic)

        started = time.monotonic()
        self.node.start(api_url=self.api_url, certs=certs, pki_dir=self.run_dir / "pki",
                        admin_kubeconfig=self.kubeconfig, deadline=deadline)
        assert self.node.kubelet is not None
        deadline = max(deadline, time.monotonic() + 120)  # the node's first image imports take minutes
        self._wait_cluster_ready(self.node.kubelet, kcm, deadline)
        self.node.wait_ready(max(10.0, deadline - time.monotonic()))
        self.node.timings["ready"] = time.monotonic() - started
        assert self.s3 is not None
        with self.api_client() as api:
            podnet.publish(api, s3_port=int(self.s3.endpoint.rsplit(":", 1)[1]),
                           kafka_pods_port=int(self.kafka.pod_bootstrap.rsplit(":", 1)[1])
                           if self.kafka and self.kafka.pod_bootstrap else None)
        log.info("Real node ready timings=%s", {k: round(v, 1) for k, v in self.node.timings.items()})
        if self.nodes == 2:
            self._start_second_node(certs, kcm)
        self._write_info()

    def _start_second_node(self, certs: pki.Pki, kcm: ManagedProcess) -> None:
        assert self.node is not None
        started = time.monotonic()
        self.second_node = SecondNode(self.node, f"{self.node_name}-2")
        self.second_node.claim()
        # its first image imports (its own store) take minutes, once per machine
        deadline = time.monotonic() + 900
        self.second_node.start(api_url=self.api_url, certs=certs, pki_dir=self.run_dir / "pki",
                               admin_kubeconfig=self.kubeconfig, deadline=deadline)
        assert self.second_node.kubelet is not None
        self._wait_cluster_ready(self.second_node.kubelet, kcm, deadline, self.second_node.node_name)
        self.second_node.timings["ready"] = time.monotonic() - started
        log.info("Second node ready timings=%s", {k: round(v, 1) for k, v in self.second_node.timings.items()})

    def _wait_cluster_ready(self, kubelet: ManagedProcess, kcm: ManagedProcess, deadline: float,
                            node_name: str | None = None) -> None:
        name = node_name or self.node_name
        with self.api_client() as api:
            core = client.CoreV1Api(api)

            def node_ready() -> bool:
                node = core.read_node(name)
                return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

            kubelet.wait_ready(node_ready, max(5.0, deadline - time.monotonic()), f"registered as a Ready node {name}")

            def default_service_account() -> bool:
                core.read_namespaced_service_account("default", "default")
                core.read_namespaced_config_map("kube-root-ca.crt", "default")
                return True

            kcm.wait_ready(
                default_service_account,
                max(5.0, deadline - time.monotonic()),
                "running its service-account and root-CA controllers (default/default ServiceAccount)",
            )

    def _write_info(self) -> None:
        (self.run_dir / "testbed.json").write_text(json.dumps(self.info(), indent=2))

    def info(self) -> dict[str, Any]:
        return {
            "kubeconfig": str(self.kubeconfig),
            "api_url": self.api_url,
            "ca_file": str(self.ca_file),
            "s3": asdict(self.s3) if self.s3 else None,
            "s3_endpoint_for_pods": self.s3_endpoint_for_pods() if self.s3 else None,
            "kafka_bootstrap": self.kafka.bootstrap if self.kafka else None,
            "kafka_bootstrap_for_pods": self.kafka.pod_bootstrap if self.kafka else None,
            "buckets": list(self.buckets),
            "jars_dir": str(self.jars_dir) if self.jars_dir else None,
            "run_dir": str(self.run_dir),
            "log_dir": str(self.log_dir),
            "audit_log": str(self.audit_log),
            "pod_logs_dir": str(self.pod_logs_dir),
            "node_name": self.node_name,
            "pids": {p.name: p.pid for p in self._processes + (self.node.processes if self.node else [])},
            "second_node": self.second_node.node_name if self.second_node else None,
        }

    def stop(self, keep: bool = False) -> None:
        """Stops every component, the kubelet (and so every pod) first; removes the run dir unless ``keep``.

        A real node is stopped first and swept: its pods, mounts, bridge, chains and cgroups go."""
        if self.second_node is not None:
            try:
                self.second_node.stop()
            except Exception as exc:  # the first node's sweep removes what is left of it
                log.warning("Failed to stop the second node error=%s", exc)
        if self.node is not None:
            try:
                self.node.stop()
            except Exception as exc:
                log.warning("Failed to stop the real node error=%s", exc)
        if self.kafka is not None:  # KafkaBroker.restart() replaced its process
            self._processes = [self.kafka.process if p.name == "kafka" else p for p in self._processes]
        for proc in reversed(self._processes):
            try:
                proc.stop(timeout=30 if proc.name == "kubelet" else 10)
            except Exception as exc:
                log.warning("Failed to stop component=%s error=%s", proc.name, exc)
        self._processes.clear()
        if keep:
            log.info("Kept test bed logs log_dir=%s", self.log_dir)
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    # --- access ------------------------------------------------------------------
    def api_client(self) -> client.ApiClient:
        """A new admin ``kubernetes`` ApiClient (system:masters); close it or use ``with``."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def s3_client(self) -> Any:
        """A boto3 S3 client for the test bed's server."""
        assert self.s3 is not None, "the test bed is not started"
        return s3_client(self.s3)

    def s3_endpoint_for_pods(self) -> str:
        """Where a pod reaches S3: the ``s3`` Service's name (testbed.podnet), which host processes cannot resolve."""
        assert self.s3 is not None, "the test bed is not started"
        return podnet.s3_endpoint_for_pods()

    def s3_endpoint_for_pods_and_host(self) -> str:
        """An S3 endpoint for a StreamJob whose operator runs on the host (it reads checkpoints and deletes
        savepoints with the spec's endpoint): the bridge's address, which pods and the host both reach while the
        node runs (host processes that dial it, like those that dial pod IPs, stop before the node: testbed.podnet's
        guard goes with it)."""
        assert self.s3 is not None, "the test bed is not started"
        return self.s3.endpoint.replace(podnet.HOST_ALIAS, BRIDGE_IP)

    def spark_s3a_conf(self) -> dict[str, str]:
        """Spark confs for s3a:// against the test bed's S3 (jars on the driver/executor classpath)."""
        assert self.s3 is not None, "the test bed is not started"
        return spark.s3a_conf(self.s3, self.jars_dir)

    @property
    def pod_logs_dir(self) -> Path:
        """Where the node's kubelet writes its pods' logs (/var/log/pods on a cluster's node)."""
        assert self.node is not None, "the test bed is not started"
        return self.node.pod_logs_dir

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        """A live pod's log (its containers' one after another unless ``container`` names one), through the API."""
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            names = [container] if container else [c.name for c in core.read_namespaced_pod(name, namespace).spec.containers]
            # the raw body: kubernetes-client turns a body that is not JSON into "b'...'"
            return "".join(core.read_namespaced_pod_log(name, namespace, container=c, _preload_content=False).data.decode(
                errors="replace") for c in names)

    def busybox_image(self) -> str:
        """The busybox image this bed's pods run: the real node's own (testbed.nodeimages)."""
        assert self.node is not None, "the test bed is not started"
        return self.node.busybox_image()

    def tag_runtime_image(self, *names: str) -> None:
        """Makes each of ``names`` run the runtime image scripts/build-images.sh built (as a registry's tags would),
        in every node's image store."""
        for node in (self.node, self.second_node):
            if node is not None:
                node.tag_image(imagestore.runtime_image(), *names)

    def node_of(self, node_name: str | None) -> RealNode:
        """The real node named ``node_name`` (a pod's ``spec.nodeName``)."""
        for node in (self.node, self.second_node):
            if node is not None and node.node_name == node_name:
                return node
        raise LookupError(f"no node {node_name!r} in this test bed")

    def _container(self, namespace: str, name: str, container: str | None) -> tuple[str | None, str]:
        """A pod's container (its first unless ``container`` names one): its node's name and containerd's id."""
        with self.api_client() as api:
            pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
        wanted = container or pod.spec.containers[0].name
        status = next((s for s in pod.status.container_statuses or [] if s.name == wanted), None)
        if status is None or not status.container_id:
            raise LookupError(f"pod {namespace}/{name} has no started container {wanted!r}")
        return pod.spec.node_name, status.container_id.partition("://")[2]

    def container_pid(self, namespace: str, name: str, container: str | None = None) -> int:
        """The host pid of a pod's container's first process (containerd's task)."""
        node_name, cid = self._container(namespace, name, container)
        rows = [line.split() for line in self.node_of(node_name).ctr("tasks", "ls").stdout.splitlines()[1:]]
        pid = next((int(row[1]) for row in rows if row and row[0] == cid), None)
        if pid is None:
            raise LookupError(f"pod {namespace}/{name}: containerd has no task for container {cid}")
        return pid

    def signal_pod(self, namespace: str, name: str, sig: int, container: str | None = None) -> None:
        """Sends ``sig`` to every process of a pod's container (SIGKILL: as an OOM kill; SIGSTOP: frozen, as on a
        lost node), through containerd (``ctr tasks kill --all``)."""
        node_name, cid = self._container(namespace, name, container)
        self.node_of(node_name).ctr("tasks", "kill", "--all", "--signal", str(int(sig)), cid)

    def component_logs(self, lines: int = 30) -> str:
        return "\n".join(f"--- {p.name} ---\n{tail(p, lines)}" for p in sorted(self.log_dir.glob("*.log")))


__all__ = ["S3Credentials", "TestBed", "TestBedError"]
