"""The real node's configuration, rendered from values: containerd, CNI, kubelet, kube-proxy, CoreDNS and its RBAC.

Called by ``testbed.node.RealNode``, which writes the files into the node's config folder
before it starts each daemon (and creates CoreDNS's ClusterRole and binding through the
API), and by the node's truth tables (tests/bed/test_node_config.py). Pure: no file,
process or clock is read here; what depends on this machine comes in as values
(``testbed.hostfacts.HostFacts``, paths, ports, this process's oom_score_adj).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed.hostfacts import HostFacts
from testbed.pki import Pki
from testbed import podnet
from testbed.podnet import BRIDGE, BRIDGE_IP, POD_SUBNET

CNI_NETWORK = "streamjob-pods"
CLUSTER_DOMAIN = "cluster.local"
COREDNS_USER = "streamjob-testbed:coredns"
# no registry is reachable, and none may be tried: every host resolves to a closed loopback port
REGISTRY_HOSTS_TOML = 'server = "http://127.0.0.1:1"\n'


def containerd_config(
    facts: HostFacts, *, root: Path, state: Path, socket: Path, opt_dir: Path, registry_config_dir: Path,
    pause_image: str, runc: str, runc_root: Path, cni_bin_dir: Path, cni_conf_dir: Path,
) -> str:
    """containerd's config.toml: its CRI on ``socket``, every registry through ``registry_config_dir``, runc and the CNI bridge."""
    oom = "true" if not facts.cap_sys_resource else "false"
    return f"""version = 3
root = '{root}'
state = '{state}'
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '{socket}'

[ttrpc]
  address = '{socket}.ttrpc'

[debug]
  level = 'info'

[metrics]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{opt_dir}'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{pause_image}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{registry_config_dir}'
  [plugins.'io.containerd.cri.v1.runtime']
    # this machine lacks CAP_SYS_RESOURCE (testbed.hostfacts): runc cannot lower a
    # sandbox's oom_score_adj below containerd's own
    restrict_oom_score_adj = {oom}
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          Root = '{runc_root}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{cni_bin_dir}']
      conf_dir = '{cni_conf_dir}'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""


def cni_config(*, data_dir: Path, ip_range: tuple[str, str] = podnet.NODE_IP_RANGES[0]) -> dict[str, Any]:
    """The CNI conflist: pods on the bridge, their addresses from ``ip_range`` (first, last) of the pod range
    (host-local IPs in ``data_dir``; each node of the test bed has its own part of the range), no masquerade, portmap."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "rangeStart": ip_range[0], "rangeEnd": ip_range[1], "gateway": BRIDGE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(data_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
        ],
    }


def resolv_conf() -> str:
    """The kubelet's resolvConf."""
    # pods with dnsPolicy Default get this: the node's DNS only, nothing off the machine
    return f"nameserver {BRIDGE_IP}\n"


def kubelet_config(
    facts: HostFacts, certs: Pki, *, port: int, healthz_port: int, socket: Path, cgroup_root: str, resolv_file: Path,
    pod_logs_dir: Path, oom_score_adj: int,
) -> dict[str, Any]:
    """The KubeletConfiguration: serving on the bridge, webhook authn/z, containerd on ``socket``, pods under ``cgroup_root``."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": BRIDGE_IP,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(certs.ca.cert)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(certs.kubelet_serving.cert),
        "tlsPrivateKeyFile": str(certs.kubelet_serving.key),
        "containerRuntimeEndpoint": f"unix://{socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        # cgroup v1 is deprecated in the kubelet: it refuses to start on it unless told
        "failCgroupV1": facts.cgroup_version == 2,
        "failSwapOn": False,
        "clusterDNS": [BRIDGE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv_file),
        "podLogsDir": str(pod_logs_dir),
        "oomScoreAdj": oom_score_adj,
        "serializeImagePulls": False,
        # the images are imported, never pulled: the kubelet must not collect them
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": True,
        "registerNode": True,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "maxPods": 110,
        "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(*, kubeconfig: Path, node_name: str, healthz_port: int, metrics_port: int, oom_score_adj: int) -> dict[str, Any]:
    """The KubeProxyConfiguration: iptables mode, Services on the bridge's address, health and metrics on loopback."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": BRIDGE_IP,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "mode": "iptables",
        "clusterCIDR": POD_SUBNET,
        "detectLocalMode": "ClusterCIDR",
        # NodePorts only on the bridge's address: nothing listens on this machine's other interfaces
        "nodePortAddresses": [f"{BRIDGE_IP}/32"],
        "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s", "localhostNodePorts": False},
        # leave the host's conntrack sysctls alone
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "oomScoreAdj": oom_score_adj,
    }


def corefile(*, kubeconfig: Path, ready_port: int, health_port: int) -> str:
    """CoreDNS's Corefile, on the bridge's address."""
    # The cluster zone from the API; every other name NXDOMAIN: nothing is forwarded off the machine.
    return f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {BRIDGE_IP}
    ready 127.0.0.1:{ready_port}
    health 127.0.0.1:{health_port}
    errors
    cache 5
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
}}
.:53 {{
    bind {BRIDGE_IP}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def coredns_cluster_role() -> dict[str, Any]:
    """CoreDNS's read access (kube-proxy and the scheduler have their default bindings)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": COREDNS_USER},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "namespaces", "pods"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }


def coredns_binding() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": COREDNS_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
    }
