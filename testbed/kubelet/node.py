"""The kubelet's Node: registration, status and the heartbeat Lease.

Called by ``testbed.kubelet.agent``. The node controller in
kube-controller-manager watches the Lease; renewing it keeps the Node Ready and
its pods un-evicted, as with a real kubelet.
"""

from __future__ import annotations

import datetime
import logging
import platform
import threading

from testbed.kubelet.api import ApiException, KubeletApi, Obj

log = logging.getLogger(__name__)

CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
LEASE_SECONDS = 40
RENEW_SECONDS = 10.0


def _now_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_status(host_ip: str, node_name: str, kubelet_version: str, since: str, kubelet_port: int = 0) -> Obj:
    beat = _now()

    def condition(ctype: str, status: str, reason: str, message: str) -> Obj:
        return {
            "type": ctype,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": beat,
            "lastTransitionTime": since,
        }

    return {
        "capacity": CAPACITY,
        "allocatable": CAPACITY,
        "addresses": [{"type": "InternalIP", "address": host_ip}, {"type": "Hostname", "address": node_name}],
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            condition("Ready", "True", "KubeletReady", "the test bed's process kubelet is posting ready status"),
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine()),
            "bootID": "",
            "containerRuntimeVersion": "testbed-process://0.1.0",
            "kernelVersion": platform.release(),
            "kubeProxyVersion": "",
            "kubeletVersion": kubelet_version,
            "machineID": "",
            "operatingSystem": "linux",
            "osImage": "StreamJob test bed (local processes)",
            "systemUUID": "",
        },
    }


class NodeAgent:
    def __init__(self, api: KubeletApi, node_name: str, host_ip: str, kubelet_version: str, kubelet_port: int = 0) -> None:
        self.api = api
        self.kubelet_port = kubelet_port
        self.node_name = node_name
        self.host_ip = host_ip
        self.kubelet_version = kubelet_version
        self.since = _now()

    def register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": node_status(self.host_ip, self.node_name, "", self.since)["nodeInfo"]["architecture"],
                    "streamjob.dev/testbed": "true",
                },
            },
            "spec": {},
        }
        try:
            self.api.core.create_node(body, _preload_content=False)
            log.info("Registered node node=%s", self.node_name)
        except ApiException as exc:
            if exc.status != 409:
                raise
        self.post_status()
        self.renew_lease()

    def post_status(self) -> None:
        self.api.core.patch_node_status(
            self.node_name,
            {"status": node_status(self.host_ip, self.node_name, self.kubelet_version, self.since, self.kubelet_port)},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )

    def renew_lease(self) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _now_micro(),
            },
        }
        try:
            self.api.coordination.patch_namespaced_lease(
                self.node_name, "kube-node-lease", {"spec": body["spec"]},
                _content_type="application/merge-patch+json", _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.coordination.create_namespaced_lease("kube-node-lease", body, _preload_content=False)

    def heartbeat(self, stop: threading.Event) -> None:
        beats = 0
        while not stop.wait(RENEW_SECONDS):
            beats += 1
            try:
                self.renew_lease()
                if beats % 3 == 0:
                    self.post_status()
            except Exception as exc:
                log.warning("Failed to renew node heartbeat node=%s error=%s", self.node_name, exc)
