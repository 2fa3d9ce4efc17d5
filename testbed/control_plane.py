"""Starts the real Kubernetes control plane of the test bed: etcd, kube-apiserver, kube-controller-manager.

Called by ``testbed.cluster.TestBed.start``. Every server binds to 127.0.0.1
on ports picked free at start; a port lost to a race is retried.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testbed.pki import CertPair, Pki
from testbed.proc import ManagedProcess, free_port, start_with_port_retry

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The API server's audit log records what service accounts do (the operator's
# and the drivers', running as pods under their own tokens): tests read it to
# prove the chart's RBAC is minimal. The control plane's own service accounts
# (kube-system) are left out, and so is every request made with a client cert,
# except those of a cert in the group AUDITED_GROUP (a test's own process, e.g.
# each operator replica of the two-replica tests, under a user of its own).
AUDITED_GROUP = "streamjob:audited"
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: ["system:serviceaccounts:kube-system"]
- level: Metadata
  userGroups: ["system:serviceaccounts", "{AUDITED_GROUP}"]
- level: None
"""


@dataclass(frozen=True)
class Etcd:
    process: ManagedProcess
    url: str


@dataclass(frozen=True)
class ApiServer:
    process: ManagedProcess
    url: str
    port: int


def https_status(url: str, *, ca: Path | None = None, client: CertPair | None = None, timeout: float = 3.0) -> int:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if client:
        context.load_cert_chain(str(client.cert), str(client.key))
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def start_etcd(binary: Path, data_dir: Path, log_path: Path, timeout: float = 60.0) -> Etcd:
    urls: dict[str, str] = {}

    def start() -> ManagedProcess:
        client = f"http://127.0.0.1:{free_port()}"
        peer = f"http://127.0.0.1:{free_port()}"
        urls["client"] = client
        return ManagedProcess(
            "etcd",
            [
                str(binary),
                "--name=testbed",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=testbed={peer}",
                "--initial-cluster-state=new",
                # A throwaway cluster: durability is not worth the fsync latency on CI disks.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log_path,
        )

    def ready(proc: ManagedProcess) -> None:
        def probe() -> bool:
            with urllib.request.urlopen(urls["client"] + "/health", timeout=2) as response:
                return bool(json.load(response).get("health") == "true")

        proc.wait_ready(probe, timeout, "serving")

    proc = start_with_port_retry(start, ready)
    return Etcd(proc, urls["client"])


def start_apiserver(
    binary: Path, *, etcd_url: str, pki: Pki, work_dir: Path, log_path: Path, audit_log: Path, timeout: float = 120.0,
    bind_address: str,
) -> ApiServer:
    """``bind_address``: the node's bridge address (testbed.node), where pods reach it; the ``kubernetes``
    Service's endpoint is that address (lease reconciler)."""
    chosen: dict[str, int] = {}
    work_dir.mkdir(parents=True, exist_ok=True)
    audit_policy = work_dir / "audit-policy.yaml"
    audit_policy.write_text(AUDIT_POLICY)

    def start() -> ManagedProcess:
        port = free_port()
        chosen["port"] = port
        return ManagedProcess(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={bind_address}",
                f"--secure-port={port}",
                f"--advertise-address={bind_address}",
                "--endpoint-reconciler-type=lease",
                f"--cert-dir={work_dir}",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                # kubectl logs: the API server calls the kubelet's log endpoint.
                f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
                f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
                f"--kubelet-certificate-authority={pki.ca.cert}",
                "--kubelet-preferred-address-types=InternalIP",
                # Aggregation layer: lets extension API servers (metrics-server...) work.
                f"--requestheader-client-ca-file={pki.ca.cert}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
                f"--proxy-client-key-file={pki.front_proxy_client.key}",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki.sa_public_key}",
                f"--service-account-signing-key-file={pki.sa_private_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=Node,RBAC",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
            log_path,
        )

    def ready(proc: ManagedProcess) -> None:
        url = f"https://{bind_address}:{chosen['port']}/readyz"
        proc.wait_ready(
            lambda: https_status(url, ca=pki.ca.cert, client=pki.admin) == 200, timeout, "ready (/readyz)"
        )

    proc = start_with_port_retry(start, ready)
    port = chosen["port"]
    return ApiServer(proc, f"https://{bind_address}:{port}", port)


def start_controller_manager(
    binary: Path, *, kubeconfig: Path, pki: Pki, work_dir: Path, log_path: Path, timeout: float = 90.0
) -> ManagedProcess:
    chosen: dict[str, int] = {}

    def start() -> ManagedProcess:
        port = free_port()
        chosen["port"] = port
        return ManagedProcess(
            "kube-controller-manager",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={work_dir}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_private_key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--cluster-signing-cert-file={pki.ca.cert}",
                f"--cluster-signing-key-file={pki.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--controllers=*",
                "--v=1",
            ],
            log_path,
        )

    def ready(proc: ManagedProcess) -> None:
        url = f"https://127.0.0.1:{chosen['port']}/healthz"
        proc.wait_ready(lambda: https_status(url) == 200, timeout, "healthy (/healthz)")

    return start_with_port_retry(start, ready)

