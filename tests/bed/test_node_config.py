"""Truth tables for the real node's configuration (testbed.nodeconfig): what each machine fact changes in it."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from testbed import nodeconfig
from testbed.hostfacts import HostFacts
from testbed.pki import CertPair, Pki

HOME = Path("/var/lib/streamjob-testbed-node")


def facts(*, cgroup_version: int, cap_sys_resource: bool) -> HostFacts:
    return HostFacts(cgroup_version=cgroup_version, cgroup_v1_hierarchies={}, cap_sys_resource=cap_sys_resource,
                     swap_on=False, bridge_nf_call_iptables=True, ip_forward=False, iptables_backend="legacy", kmsg=True)


def containerd_toml(host: HostFacts) -> dict[str, Any]:
    text = nodeconfig.containerd_config(
        host, root=Path("/cache/node/containerd"), state=HOME / "containerd", socket=HOME / "containerd.sock",
        opt_dir=HOME / "opt", registry_config_dir=HOME / "config" / "certs.d", pause_image="registry.k8s.io/pause:3.10.2",
        runc="/usr/sbin/runc", runc_root=HOME / "runc", cni_bin_dir=Path("/bins/cni"), cni_conf_dir=HOME / "cni" / "net.d",
    )
    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("cap_sys_resource", "restricted"),
    [
        pytest.param(False, True, id="no-CAP_SYS_RESOURCE-restricts-oom-score"),
        pytest.param(True, False, id="CAP_SYS_RESOURCE-leaves-it"),
    ],
)
def test_containerd_restricts_the_oom_score_only_without_cap_sys_resource(cap_sys_resource: bool, restricted: bool) -> None:
    config = containerd_toml(facts(cgroup_version=1, cap_sys_resource=cap_sys_resource))

    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is restricted
    assert runtime["netns_mounts_under_state_dir"] is True  # network namespaces are swept with the node's folder


def test_containerd_pulls_through_the_node_registry_config_and_serves_on_the_node_socket() -> None:
    config = containerd_toml(facts(cgroup_version=2, cap_sys_resource=True))

    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["registry"]["config_path"] == str(HOME / "config" / "certs.d")
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10.2"
    assert config["grpc"] == {"address": str(HOME / "containerd.sock")}
    assert nodeconfig.REGISTRY_HOSTS_TOML == 'server = "http://127.0.0.1:1"\n'


@pytest.mark.parametrize(
    ("cgroup_version", "fail_cgroup_v1"),
    [
        pytest.param(1, False, id="cgroup-v1-told-to-start"),
        pytest.param(2, True, id="cgroup-v2-default"),
    ],
)
def test_the_kubelet_starts_on_cgroup_v1_only_when_told(cgroup_version: int, fail_cgroup_v1: bool) -> None:
    pair = CertPair(Path("/pki/x.crt"), Path("/pki/x.key"))
    certs = Pki(pair, pair, pair, pair, pair, pair, pair, pair, Path("/pki/sa.key"), Path("/pki/sa.pub"))

    config = nodeconfig.kubelet_config(
        facts(cgroup_version=cgroup_version, cap_sys_resource=False), certs, port=10250, healthz_port=10248,
        socket=HOME / "containerd.sock", cgroup_root="/streamjob-node", resolv_file=HOME / "config" / "resolv.conf",
        pod_logs_dir=HOME / "pod-logs", oom_score_adj=0,
    )

    assert config["failCgroupV1"] is fail_cgroup_v1
    assert config["cgroupRoot"] == "/streamjob-node"
    assert config["containerRuntimeEndpoint"] == f"unix://{HOME / 'containerd.sock'}"


def test_coredns_answers_the_cluster_zone_and_forwards_nothing() -> None:
    corefile = nodeconfig.corefile(kubeconfig=Path("/config/coredns.kubeconfig"), ready_port=8181, health_port=8080)

    assert corefile.startswith(f"{nodeconfig.CLUSTER_DOMAIN}:53 ")
    assert "forward" not in corefile
    assert "rcode NXDOMAIN" in corefile
    assert nodeconfig.resolv_conf() == "nameserver 10.244.0.1\n"


def test_the_two_nodes_take_disjoint_parts_of_the_pod_range_on_one_bridge() -> None:
    """A second node (testbed.secondnode) shares the first's bridge: its pods' addresses never collide with the first's."""
    import ipaddress

    from testbed import podnet

    subnet = ipaddress.ip_network(podnet.POD_SUBNET)
    parts = []
    for ip_range in podnet.NODE_IP_RANGES:
        bridge = nodeconfig.cni_config(data_dir=HOME / "cni", ip_range=ip_range)["plugins"][0]
        assert bridge["bridge"] == podnet.BRIDGE
        (entry,) = bridge["ipam"]["ranges"][0]
        first, last = ipaddress.ip_address(entry["rangeStart"]), ipaddress.ip_address(entry["rangeEnd"])
        assert first in subnet and last in subnet and first <= last and entry["gateway"] == podnet.BRIDGE_IP
        parts.append(range(int(first), int(last) + 1))
    assert not set(parts[0]) & set(parts[1])
    assert int(ipaddress.ip_address(podnet.BRIDGE_IP)) not in set(parts[0]) | set(parts[1])
