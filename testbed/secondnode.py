"""A second real node on the same machine, for what one node cannot show: a node lost while others serve.

Called by ``testbed.cluster.TestBed`` when it is asked for ``nodes=2`` (real node only):
``claim()`` and ``start()`` once the first node is Ready, ``stop()`` before the first
node stops. Used by the node-loss test and benchmark
(tests/e2e/test_real_node_loss.py, benchmarks/node_loss.py --real): a driver runs
here, the node is made NotReady (``stop_kubelet``: its kubelet frozen, its containers
left running, as when a node's kubelet hangs or is cut off from the API server), and
the replacement runs on the first node.

What it shares with the first node, whose lock covers it: the bridge (its pods take
the upper half of the pod range, ``podnet.NODE_IP_RANGES[1]``), the node's address
(its kubelet serves on another port), CoreDNS, kube-proxy and kube-scheduler (one of
each serves the whole test bed), the cgroup parent (its pods go under
``/streamjob-node/<name>``). Its own: containerd with its own image store
(``<cache>/node/containerd-2``, imported once per image id like the first's), its state,
socket and runc root, the kubelet's root, pod logs and CNI allocations, all under
``<first node's home>/<name>``: the first node's sweep removes every trace of it (its
processes name paths under that home, its mounts are below it, its cgroups below the
first's).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from testbed import nodehost, podnet
from testbed import kubeconfig as kubeconfig_file
from testbed import pki as pki_mod
from testbed.hostops import NodeError
from testbed.node import CGROUP_PARENT, SECOND_CONTAINERD, RealNode


class SecondNode(RealNode):
    """A second node beside ``first``: containerd and a kubelet, sharing the first node's network and daemons."""

    def __init__(self, first: RealNode, node_name: str) -> None:
        super().__init__(first.log_dir, node_name, home=first.home / node_name, lock_file=first.lock_file)
        self.first = first
        self.containerd_root = first.containerd_root.with_name(SECOND_CONTAINERD)
        self.ip_range = podnet.NODE_IP_RANGES[1]
        self.cgroup_root = f"/{CGROUP_PARENT}/{node_name}"
        self.log_prefix = f"{node_name}-"
        self._claimed = False

    @property
    def running(self) -> bool:
        return self._claimed

    def claim(self) -> None:
        """The first node holds the lock and has set up the bridge: only this node's cgroup parent is made."""
        if not self.first.running:
            raise NodeError("the second node needs the first one claimed (its lock, bridge and chains)")
        self._bins = self.first._bins
        nodehost.make_cgroup_parent(self.facts, self.cgroup_root.strip("/"))
        self._claimed = True

    def start(self, *, api_url: str, certs: pki_mod.Pki, pki_dir: Path, admin_kubeconfig: Path, deadline: float) -> None:
        """containerd, the images, the kubelet (with a client certificate of its own node name)."""
        self._start_runtime(deadline)
        client = pki_mod.client_cert(pki_dir, certs.ca, f"kubelet-{self.node_name}", f"system:node:{self.node_name}",
                                     ("system:nodes",))
        kubeconfig = kubeconfig_file.write(self.config_dir / "kubelet.kubeconfig", server=api_url, ca_file=certs.ca.cert,
                                           client=client, user=f"system:node:{self.node_name}")
        self.ca_file = certs.ca.cert
        self.kubelet = self._start_kubelet(kubeconfig, certs)

    def wait_ready(self, timeout: float = 60) -> None:
        """Nothing of its own to wait for beyond the Node's Ready (kube-proxy is the first node's)."""

    def stop_kubelet(self) -> None:
        """Freezes the kubelet (SIGSTOP): it neither reports the node nor stops its pods, whose containers run
        on, so the node goes NotReady once the node controller's grace period passes. ``thaw`` undoes it."""
        assert self.kubelet is not None
        os.killpg(self.kubelet.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """Undoes ``stop_kubelet`` and a ``ctr tasks pause`` of its containers: the kubelet reports the node again
        and ends the containers of pods that are gone."""
        assert self.kubelet is not None
        if self.kubelet.alive():
            os.killpg(self.kubelet.pid, signal.SIGCONT)
        for task in self.task_ids():
            self.ctr("tasks", "resume", task, check=False)

    def stop(self) -> None:
        """Stops the kubelet (thawed first) and containerd, which forgets its containers; the first node's sweep
        removes the rest."""
        if not self._claimed:
            return
        started = time.monotonic()
        try:
            containerd = next((p for p in self.processes if p.name == "containerd"), None)
            if self.kubelet is not None and containerd is not None and containerd.alive():
                self.thaw()
            if self.kubelet is not None and self.kubelet.alive():
                self.kubelet.stop(timeout=10)
            if containerd is not None and containerd.alive():
                try:
                    self._forget_containers()
                finally:
                    containerd.stop(timeout=15)
            self.processes.clear()
        finally:
            self._claimed = False
        self.timings["stop"] = time.monotonic() - started

