"""How the host's servers and the real node's pods reach each other, with no packet able to leave the machine.

Called by ``testbed.nodehost`` (``install`` when it sets up the real node's bridge; its
chains go with the node's sweep, which removes every ``STREAMJOB-*`` chain), by
``testbed.node`` and ``testbed.nodeconfig`` (the bridge's name and addresses) and by
``testbed.cluster.TestBed`` (``HOST_ALIAS`` for host clients, ``publish`` once the API
serves).

The servers pods must reach (the API server, S3) listen on the bridge's address,
10.244.0.1, the only address of this machine a pod can reach. Host clients never dial
it: they dial ``HOST_ALIAS`` (127.244.0.1, a loopback address) and a nat OUTPUT rule
rewrites it to the bridge's address. So:

- while the node runs, 127.244.0.1 leads to the servers on the bridge, by loopback;
- once the node is swept (the rule gone, the bridge gone), 127.244.0.1 is an address
  nobody listens on: a client left behind gets "connection refused" from this machine,
  where 10.244.0.1 would have followed the default route off it;
- a loopback alias of its own, not 127.0.0.1: a rule on 127.0.0.1:PORT would also
  capture other programs' connections to that port (other test beds use 9000).

A guard in filter OUTPUT rejects any packet for the pod range that would leave through
an interface other than the bridge or loopback (the bridge removed under a running
client, a route added by someone else); mangle FORWARD (``testbed.nodehost``) already
drops what pods would send through the machine.

Pods reach S3 by name: a selector-less Service ``s3`` in namespace ``NAMESPACE`` whose
EndpointSlice holds the bridge's address and S3's port (``http://s3.streamjob-testbed.svc.cluster.local:9000``,
kube-proxy rewrites it, CoreDNS names it); Kafka, when the test bed runs it, the same way
(``kafka``, the broker's PODS listener, testbed.kafka); the API server through the
``kubernetes`` Service as usual (its lease reconciler keeps the bridge's address as the endpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BRIDGE = "sjnode0"
BRIDGE_IP = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
# the pod range's addresses of each node on the bridge (the second node: TestBed(nodes=2), testbed.secondnode)
NODE_IP_RANGES = (("10.244.0.2", "10.244.0.127"), ("10.244.0.128", "10.244.0.254"))
SERVICE_SUBNET = "10.96.0.0/16"  # testbed.control_plane.SERVICE_CLUSTER_IP_RANGE
HOST_ALIAS = "127.244.0.1"
GUARD_CHAIN = "STREAMJOB-GUARD"
ALIAS_CHAIN = "STREAMJOB-ALIAS"
NAMESPACE = "streamjob-testbed"
S3_SERVICE_PORT = 9000
MANAGED_BY = "streamjob-testbed"

Runner = Callable[[list[str]], Any]


def rules() -> list[tuple[str, list[str]]]:
    """(table, iptables arguments) in order: the guard and the alias (pure; ``install`` applies them)."""
    return [
        ("filter", ["-N", GUARD_CHAIN]),
        ("filter", ["-A", GUARD_CHAIN, "-o", BRIDGE, "-j", "RETURN"]),
        ("filter", ["-A", GUARD_CHAIN, "-o", "lo", "-j", "RETURN"]),
        # REJECT, not DROP: a client that took a wrong turn fails at once instead of timing out
        ("filter", ["-A", GUARD_CHAIN, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"]),
        ("filter", ["-A", GUARD_CHAIN, "-j", "REJECT", "--reject-with", "icmp-net-unreachable"]),
        ("filter", ["-I", "OUTPUT", "1", "-d", POD_SUBNET, "-j", GUARD_CHAIN]),
        # a ClusterIP kube-proxy has not rewritten (yet, or any more) would follow the default route too
        ("filter", ["-I", "OUTPUT", "1", "-d", SERVICE_SUBNET, "-j", GUARD_CHAIN]),
        ("nat", ["-N", ALIAS_CHAIN]),
        ("nat", ["-A", ALIAS_CHAIN, "-d", f"{HOST_ALIAS}/32", "-j", "DNAT", "--to-destination", BRIDGE_IP]),
        ("nat", ["-I", "OUTPUT", "1", "-o", "lo", "-j", ALIAS_CHAIN]),
    ]


def install(run: Runner) -> None:
    """Applies ``rules()`` with ``run(argv)`` (raises on failure); the node's sweep removes them."""
    for table, args in rules():
        run(["iptables", "-w", "5", "-t", table, *args])


def host_service(name: str, port_name: str, service_port: int, host_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A selector-less Service `name` and its EndpointSlice: the bridge's address and a host server's real port."""
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY}
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {"ports": [{"name": port_name, "port": service_port, "targetPort": host_port, "protocol": "TCP"}]},
    }
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{name}-testbed", "namespace": NAMESPACE,
                     "labels": {**labels, "kubernetes.io/service-name": name,
                                "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [BRIDGE_IP], "conditions": {"ready": True}}],
        "ports": [{"name": port_name, "port": host_port, "protocol": "TCP"}],
    }
    return service, slice_


def s3_service(s3_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Service ``s3``: port 9000 to S3's real port."""
    return host_service("s3", "http", S3_SERVICE_PORT, s3_port)


def kafka_service(pods_port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Service ``kafka``: the broker's PODS listener, on the same port (the broker advertises
    ``kafka_host()``:that port, so a client's second connection goes where its first did)."""
    return host_service("kafka", "kafka", pods_port, pods_port)


def s3_endpoint_for_pods() -> str:
    return f"http://s3.{NAMESPACE}.svc.cluster.local:{S3_SERVICE_PORT}"


def kafka_host() -> str:
    """The name the broker's PODS listener advertises (testbed.kafka.PodListener)."""
    return f"kafka.{NAMESPACE}.svc.cluster.local"


def publish(api: Any, *, s3_port: int, kafka_pods_port: int | None = None) -> None:
    """Creates the namespace, the ``s3`` Service (and with `kafka_pods_port` the ``kafka`` one) and
    their EndpointSlices (``api``: an admin ApiClient)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)

    def create(call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except ApiException as exc:
            if exc.status != 409:  # already there: a second publish is harmless
                raise

    create(core.create_namespace, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    services = [s3_service(s3_port)] + ([kafka_service(kafka_pods_port)] if kafka_pods_port is not None else [])
    for service, slice_ in services:
        create(core.create_namespaced_service, NAMESPACE, service)
        create(discovery.create_namespaced_endpoint_slice, NAMESPACE, slice_)
