"""The real node: containerd, kubelet, kube-proxy, kube-scheduler and CoreDNS on a bridge inside this machine.

One test bed for the module (its own, not the session's: ``REAL_BED_KAFKA``); the last tests
stop it and check that nothing is left on the machine, then crash one and check that the next
start sweeps what it left.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from testbed import TestBed, hostfacts, imagestore, locate
from testbed.cluster import TestBedError
from testbed.podnet import HOST_ALIAS
from testbed.node import BRIDGE, BRIDGE_IP, CGROUP_PARENT, LOCK_FILE, NODE_HOME, RealNode, cgroup_mount_points, iptables_chains, mounts_under
from testbed.waiting import wait_for


POD_TIMEOUT = 120
REAL_BED_KAFKA = True  # tests/conftest.py: the broker's PODS listener, for the Kafka Service test


@pytest.fixture(scope="module")
def core(real_bed: TestBed) -> Iterator[client.CoreV1Api]:
    with real_bed.api_client() as api:
        yield client.CoreV1Api(api)


def new_namespace(core: client.CoreV1Api) -> str:
    name = f"real-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: core.read_namespaced_service_account("default", name), 30, f"default ServiceAccount in {name}")
    return name


@pytest.fixture
def ns(core: client.CoreV1Api, real_bed: TestBed) -> Iterator[str]:
    name = new_namespace(core)
    yield name
    # Only while the node runs: once it is gone, the API server's loopback alias refuses.
    if real_bed.node is not None and real_bed.node.running:
        core.delete_namespace(name, grace_period_seconds=0)


def busybox(real_bed: TestBed) -> str:
    assert real_bed.node is not None
    return real_bed.node.busybox_image()


def pod(name: str, image: str, command: list[str], *, restart: str = "Never", labels: dict[str, str] | None = None,
        memory_limit: str | None = None, port: int | None = None) -> client.V1Pod:
    resources = client.V1ResourceRequirements(limits={"memory": memory_limit, "cpu": "500m"}) if memory_limit else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1PodSpec(
            restart_policy=restart,
            termination_grace_period_seconds=1,
            containers=[client.V1Container(
                name="main", image=image, image_pull_policy="Never", command=command, resources=resources,
                ports=[client.V1ContainerPort(container_port=port)] if port else None,
                # Ready only once the server listens: a container is Running (and, without a probe, Ready) as
                # soon as it starts, before its shell has exec'd the server; a connection then is refused
                readiness_probe=client.V1Probe(tcp_socket=client.V1TCPSocketAction(port=port), period_seconds=1)
                if port else None,
            )],
        ),
    )


def finished(core: client.CoreV1Api, ns: str, name: str, timeout: float = POD_TIMEOUT) -> client.V1ContainerStateTerminated:
    def probe() -> client.V1ContainerStateTerminated | None:
        p = core.read_namespaced_pod(name, ns)
        for status in p.status.container_statuses or []:
            if status.state and status.state.terminated:
                return status.state.terminated
            if status.state and status.state.waiting and status.state.waiting.reason in ("ErrImageNeverPull", "CreateContainerError"):
                raise AssertionError(f"pod {name} cannot start: {status.state.waiting}")
        return None

    return wait_for(probe, timeout, f"pod {ns}/{name} to finish")


def running_ip(core: client.CoreV1Api, ns: str, name: str) -> str:
    def probe() -> str | None:
        p = core.read_namespaced_pod(name, ns)
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        return p.status.pod_ip if p.status.phase == "Running" and ready else None

    return wait_for(probe, POD_TIMEOUT, f"pod {ns}/{name} running")


def web_server(core: client.CoreV1Api, ns: str, image: str, name: str, body: str) -> str:
    command = ["sh", "-c", f"mkdir -p /tmp/www && echo {body} > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
    core.create_namespaced_pod(ns, pod(name, image, command, restart="Always", labels={"app": name}, port=8080))
    return running_ip(core, ns, name)


# --- the node and pods -----------------------------------------------------------------
def test_node_is_ready_with_containerd_and_the_bridge_address(core: client.CoreV1Api, real_bed: TestBed) -> None:
    node = core.read_node(real_bed.node_name)

    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
    assert node.status.node_info.kubelet_version == locate.K8S_VERSION
    assert node.status.node_info.container_runtime_version == f"containerd://{locate.node_pin('CONTAINERD_VERSION').lstrip('v')}"
    assert {"type": "InternalIP", "address": BRIDGE_IP} in [a.to_dict() for a in node.status.addresses]
    # the API server listens on the bridge (pods reach it there and through the kubernetes Service);
    # host clients dial its loopback alias
    assert real_bed.api_url.startswith(f"https://{HOST_ALIAS}:")
    endpoints = core.read_namespaced_endpoints("kubernetes", "default")
    assert [a.ip for s in endpoints.subsets for a in s.addresses] == [BRIDGE_IP]



def test_the_nodes_pods_weigh_as_the_machines_cpus_against_host_processes(real_bed: TestBed) -> None:
    # a new cgroup weighs as one host process: every pod together would get one process's share of a busy machine
    facts = hostfacts.detect()
    cpus = os.cpu_count() or 1
    if facts.cgroup_version == 2:
        tops = {Path(hostfacts.CGROUP_ROOT) / CGROUP_PARENT: ("cpu.weight", min(10000, 100 * cpus))}
    else:
        tops = {Path(facts.cgroup_v1_hierarchies["cpu"]) / CGROUP_PARENT: ("cpu.shares", 1024 * cpus)}
    for top, (name, weight) in tops.items():
        assert int((top / name).read_text()) == weight, top / name

def test_runtime_image_pod_runs_a_command_and_its_log_is_read_through_the_api(core: client.CoreV1Api, real_bed: TestBed, ns: str) -> None:
    image = imagestore.runtime_image()
    command = ["python3", "-c", "import job_runtime, pyspark, socket; print('runtime', pyspark.__version__, socket.gethostname())"]
    core.create_namespaced_pod(ns, pod("runtime", image, command))

    terminated = finished(core, ns, "runtime", timeout=180)

    assert terminated.exit_code == 0, real_bed.pod_log(ns, "runtime")
    assert "runtime 4." in real_bed.pod_log(ns, "runtime")
    assert real_bed.pod_log(ns, "runtime").strip().endswith(" runtime")  # hostname = pod name


def test_pod_reaches_another_pod_through_a_service_name(core: client.CoreV1Api, real_bed: TestBed, ns: str) -> None:
    image = busybox(real_bed)
    web_server(core, ns, image, "web", "hello-through-the-service")
    core.create_namespaced_service(ns, client.V1Service(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1ServiceSpec(selector={"app": "web"}, ports=[client.V1ServicePort(port=80, target_port=8080)]),
    ))
    # (busybox 1.35's wget -T crashes with SIGSEGV: timeout(1) bounds it instead)
    # the short name goes through the pod's search domains, the long one straight to CoreDNS;
    # both resolve to the ClusterIP, which only kube-proxy's rules lead to the pod
    script = textwrap.dedent(f"""
        set -e
        for i in $(seq 1 30); do timeout 5 wget -q -O /tmp/short http://web/ && break; sleep 1; done
        timeout 10 wget -q -O /tmp/long http://web.{ns}.svc.cluster.local/
        nslookup web.{ns}.svc.cluster.local {BRIDGE_IP} | tail -n 3
        cat /tmp/short /tmp/long
    """)
    core.create_namespaced_pod(ns, pod("client", image, ["sh", "-c", script]))

    terminated = finished(core, ns, "client")
    out = real_bed.pod_log(ns, "client")

    assert terminated.exit_code == 0, out
    assert out.count("hello-through-the-service") == 2, out
    cluster_ip = core.read_namespaced_service("web", ns).spec.cluster_ip
    assert cluster_ip in out, out


def test_pod_over_its_memory_limit_is_oom_killed(core: client.CoreV1Api, real_bed: TestBed, ns: str) -> None:
    # dd allocates its block (128 MiB) and fills it: over the 32 MiB limit
    core.create_namespaced_pod(ns, pod("hog", busybox(real_bed), ["dd", "if=/dev/zero", "of=/dev/null", "bs=128M", "count=4"],
                                       memory_limit="32Mi"))

    terminated = finished(core, ns, "hog")

    assert terminated.reason == "OOMKilled", terminated
    assert terminated.exit_code == 137


def test_host_reaches_a_pod_on_the_bridge(core: client.CoreV1Api, real_bed: TestBed, ns: str) -> None:
    ip = web_server(core, ns, busybox(real_bed), "web", "hello-host")

    assert ip.startswith("10.244.0."), ip
    body = wait_for(lambda: urllib.request.urlopen(f"http://{ip}:8080/", timeout=3).read().decode(), 30, f"http://{ip}:8080/")
    assert body.strip() == "hello-host"


def test_a_host_packet_for_the_pod_range_that_would_leave_on_another_interface_is_refused(real_bed: TestBed) -> None:
    # A veth pair with both ends on this machine stands in for the way out (this kernel has no dummy
    # device): whatever goes into one end comes out of the other, here, so this test sends nothing off
    # the machine even if the guard failed. A /32 route into it, more specific than the bridge's /24,
    # is the wrong turn; without the guard the connection fails differently (no ARP answer: no route
    # to host, or a timeout), not with a reset at once.
    dummy, target = "sjguard0", "10.244.0.250"
    subprocess.run(["ip", "link", "add", dummy, "type", "veth", "peer", "name", "sjguard1"], check=True)
    try:
        subprocess.run(["ip", "link", "set", "sjguard1", "up"], check=True)
        subprocess.run(["ip", "link", "set", dummy, "up"], check=True)
        subprocess.run(["ip", "route", "add", f"{target}/32", "dev", dummy], check=True)
        started = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((target, 80), timeout=10).close()
        # refused at once by the guard's reset, not a timeout in the void
        assert time.monotonic() - started < 5
    finally:
        subprocess.run(["ip", "link", "del", dummy], check=False)


def test_a_pod_reaches_s3_through_the_s3_service(core: client.CoreV1Api, real_bed: TestBed, ns: str) -> None:
    assert real_bed.s3 is not None
    endpoint = real_bed.s3_endpoint_for_pods()
    assert endpoint == "http://s3.streamjob-testbed.svc.cluster.local:9000"
    # an unsigned request: the server answers 403 AccessDenied in XML, which only S3 says
    script = f"for i in $(seq 1 20); do timeout 5 wget -q -O - {endpoint}/streamjob/ 2>&1 && break; sleep 1; done; true"
    core.create_namespaced_pod(ns, pod("s3probe", busybox(real_bed), ["sh", "-c", script]))

    finished(core, ns, "s3probe")
    out = real_bed.pod_log(ns, "s3probe")

    assert "403" in out or "Forbidden" in out, out


KAFKA_PROBE = """
import os
from confluent_kafka import KafkaError, Producer

with open("/tmp/ca.crt", "w") as ca:
    ca.write(os.environ["KAFKA_CA"])

def conf(password, ca_location="/tmp/ca.crt"):
    conf = {"bootstrap.servers": os.environ["BROKERS"], "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": os.environ["KAFKA_USER"], "sasl.password": password,
            "enable.idempotence": True}
    return {**conf, "ssl.ca.location": ca_location} if ca_location else conf

producer = Producer(conf(os.environ["KAFKA_PASSWORD"]))
producer.produce(os.environ["TOPIC"], key=b"pod", value=b"hello from a pod")
print("unsent after flush:", producer.flush(60), flush=True)

def refused(config, code):
    seen = []
    client = Producer({**config, "error_cb": lambda err: seen.append(err.code())})
    for _ in range(20):  # librdkafka reports a failed handshake or SCRAM exchange through error_cb, served by poll
        if code in seen:
            return "REFUSED"
        client.poll(1)
    return f"NOT REFUSED {seen}"

print("wrong password:", refused(conf("not-the-password"), KafkaError._AUTHENTICATION), flush=True)
print("without the CA:", refused(conf(os.environ["KAFKA_PASSWORD"], ca_location=None), KafkaError._SSL), flush=True)
"""


def test_a_pod_reaches_the_broker_through_the_kafka_service_with_tls_and_scram(core: client.CoreV1Api, real_bed: TestBed,
                                                                              ns: str) -> None:
    broker = real_bed.kafka
    assert broker is not None and broker.pod_bootstrap is not None
    assert broker.pod_bootstrap.startswith("kafka.streamjob-testbed.svc.cluster.local:")
    topic = broker.create_topic(f"podprobe-{uuid.uuid4().hex[:6]}")
    [(user, password)] = broker.pod_users.items()
    env = {"BROKERS": broker.pod_bootstrap, "KAFKA_USER": user, "KAFKA_PASSWORD": password, "TOPIC": topic,
           "KAFKA_CA": real_bed.ca_file.read_text()}
    probe = pod("kafkaprobe", imagestore.runtime_image(), ["python3", "-c", KAFKA_PROBE])
    probe.spec.containers[0].env = [client.V1EnvVar(name=k, value=v) for k, v in env.items()]
    core.create_namespaced_pod(ns, probe)

    done = finished(core, ns, "kafkaprobe", timeout=180)
    out = real_bed.pod_log(ns, "kafkaprobe")

    assert done.exit_code == 0, out
    # the broker's certificate is the test bed CA's: verified with it, refused by the image's public CAs alone
    assert "unsent after flush: 0" in out, out
    assert "wrong password: REFUSED" in out and "without the CA: REFUSED" in out, out
    # the record the pod sent is on the broker, read back from the host's loopback listener
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = wait_for(lambda: (m := consumer.poll(1)) is not None and m.error() is None and m, 60, "the pod's record")
        assert (message.key(), message.value()) == (b"pod", b"hello from a pod")
    finally:
        consumer.close()


def test_a_second_real_node_test_bed_refuses_and_leaves_the_first_alone(core: client.CoreV1Api, real_bed: TestBed,
                                                                         tmp_path: Path) -> None:
    second = TestBed(tmp_path / "second")

    with pytest.raises(TestBedError) as refused:
        second.start()

    message = str(refused.value)
    assert "another test bed runs the real node on this machine" in message
    assert f"pid {os.getpid()}" in message
    assert Path(f"/sys/class/net/{BRIDGE}").exists()
    node = core.read_node(real_bed.node_name)
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


# --- teardown, and a crash ------------------------------------------------------------------
def node_traces(node: RealNode) -> list[str]:
    """What a real node would leave on this machine."""
    traces = []
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        traces.append(f"bridge {BRIDGE}")
    for binary in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            traces += [f"{binary}/{table} chain {c}" for c in iptables_chains(binary, table)]
    traces += [f"mount {m}" for m in mounts_under(NODE_HOME, node.containerd_root)]
    traces += [f"cgroup {p / CGROUP_PARENT}" for p in cgroup_mount_points() if (p / CGROUP_PARENT).exists()]
    if NODE_HOME.exists():
        traces.append(f"folder {NODE_HOME}")
    netns = Path("/run/netns")
    if netns.is_dir():
        traces += [f"netns {n.name}" for n in netns.iterdir() if n.name.startswith("cni-")]
    return traces


def test_teardown_leaves_no_bridge_chain_mount_cgroup_or_folder(core: client.CoreV1Api, real_bed: TestBed) -> None:
    assert real_bed.node is not None
    node = real_bed.node
    ns = new_namespace(core)
    # something to tear down: a running pod, with its sandbox, netns, mounts and cgroups
    web_server(core, ns, busybox(real_bed), "web", "to-be-torn-down")
    forward_before = json.loads(node.state_file.read_text())["sysctls"]["net.ipv4.ip_forward"]
    assert node_traces(node)

    real_bed.stop(keep=False)

    assert node_traces(node) == []
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == forward_before
    # a client left behind dials the loopback alias: refused on this machine, nothing routed off it
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST_ALIAS, int(real_bed.api_url.rsplit(":", 1)[1])), timeout=5).close()
    assert not node.socket.exists()
    # the lock is free again
    probe = RealNode(real_bed.log_dir, "probe")
    probe._take_lock()
    probe._release_lock()


CRASHING_BED = """
import sys, time
from kubernetes import client
from testbed import TestBed
from testbed.waiting import wait_for
bed = TestBed(sys.argv[1])
bed.start()
with bed.api_client() as api:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", client.V1Pod(
        metadata=client.V1ObjectMeta(name="survivor"),
        spec=client.V1PodSpec(containers=[client.V1Container(
            name="main", image=bed.node.busybox_image(), image_pull_policy="Never", command=["sleep", "3600"])])))
    wait_for(lambda: core.read_namespaced_pod("survivor", "default").status.phase == "Running", 120, "survivor running")
print("READY", flush=True)
time.sleep(3600)
"""


def test_a_start_after_a_crash_sweeps_what_the_crashed_node_left(real_bed: TestBed, tmp_path: Path) -> None:
    # runs after the teardown test: the module's test bed is stopped
    assert real_bed.node is not None and not real_bed.node.running
    crashed = subprocess.Popen([sys.executable, "-c", CRASHING_BED, str(tmp_path / "crashed")], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert crashed.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (lines and lines[-1].startswith("READY")):
            ready, _, _ = select.select([crashed.stdout], [], [], 5)
            if ready:
                line = crashed.stdout.readline()
                if not line:
                    break
                lines.append(line)
        assert lines and lines[-1].startswith("READY"), "".join(lines[-40:])
    finally:
        os.killpg(crashed.pid, signal.SIGKILL)  # the test bed process and what dies with it; not the shims or pods
        crashed.wait(30)
    node = RealNode(tmp_path, "probe")
    left = node_traces(node)
    assert f"bridge {BRIDGE}" in left and any(t.startswith("mount ") for t in left), left

    after = TestBed(tmp_path / "after")
    after.start()
    try:
        with after.api_client() as api:
            assert client.CoreV1Api(api).list_namespaced_pod("default").items == []
    finally:
        after.stop(keep=False)

    assert node_traces(node) == []


def test_host_facts_are_detected() -> None:
    facts = hostfacts.detect()

    assert facts.cgroup_version in (1, 2)
    assert facts.cap_sys_resource == hostfacts.has_capability(hostfacts.CAP_SYS_RESOURCE)
    if facts.cgroup_version == 1:
        assert "memory" in facts.cgroup_v1_hierarchies
    assert "cgroup v" in facts.describe()
    assert LOCK_FILE.parent.is_dir()
