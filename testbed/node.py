"""The test bed's real node: containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS, CNI bridge networking.

Called by ``testbed.cluster.TestBed``: ``claim()``
before the control plane (the API server binds to the bridge's address, where pods
reach it), ``start()`` once the API server is up, ``stop()`` at the end. Binaries and
small images come from ``testbed/build/build-node.sh`` (``locate.node_bin_dir()``).

Its parts: ``testbed.nodehost`` makes the node's changes to this machine (a bridge
``sjnode0`` with the pods' range, its iptables chains, sysctls, cgroups) and sweeps them
away, each listed in its docstring; ``testbed.hostops`` reads and removes each kind of host
state (mounts, cgroups, iptables chains, nft tables, processes); ``testbed.nodeconfig``
renders the daemons' configuration from values; ``testbed.nodeimages`` imports the images.
This module holds the order: lock, sweep, set up, start each daemon, stop, sweep. A stop
undoes every change; after a crash, the next ``claim()`` sweeps the leftovers first.

Kept across runs, in the cache: containerd's image store (``<cache>/node/containerd``),
so an image is imported once; a stop leaves only images in it.

Only one real node runs on a machine: a lock file (``LOCK_FILE``) is held from
``claim()`` to the end of ``stop()``; a second test bed gets ``NodeBusyError``
naming the holder, and changes nothing.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import yaml

from testbed import hostfacts, hostops, locate, nodeconfig, nodehost, nodeimages, podnet
from testbed import kubeconfig as kubeconfig_file
from testbed import pki as pki_mod
# moved to testbed.hostops and testbed.nodehost; imported from here by tests/bed/test_real_node.py and testbed.cluster
from testbed.hostops import NodeError as NodeError
from testbed.hostops import cgroup_mount_points as cgroup_mount_points
from testbed.hostops import iptables_chains as iptables_chains
from testbed.hostops import mounts_under as mounts_under
from testbed.nodeconfig import CNI_NETWORK, COREDNS_USER
from testbed.nodehost import CGROUP_PARENT as CGROUP_PARENT
from testbed.proc import ComponentError, ManagedProcess, free_port, tail

log = logging.getLogger(__name__)

NODE_HOME = Path(os.environ.get("STREAMJOB_NODE_DIR") or "/var/lib/streamjob-testbed-node")
LOCK_FILE = Path(os.environ.get("STREAMJOB_NODE_LOCK") or "/run/lock/streamjob-testbed-node.lock")
BRIDGE, POD_SUBNET, BRIDGE_IP = podnet.BRIDGE, podnet.POD_SUBNET, podnet.BRIDGE_IP
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
CTR_LOG_LINE = re.compile(r'^time="[^"]*" level=[a-z]+ msg=')  # a line ctr logs itself, beside a container's output
NODE_LABEL = "streamjob.dev/testbed"  # every test bed node carries it (=true), on either kind of node
SECOND_CONTAINERD = "containerd-2"  # the second node's image store, beside the first's (testbed.secondnode)


class NodeBusyError(NodeError):
    """Another test bed holds this machine's real node."""


class RealNode:
    """One real node on this machine; ``testbed.nodehost`` lists what it changes on it."""

    def __init__(self, log_dir: Path, node_name: str, *, home: Path = NODE_HOME, lock_file: Path = LOCK_FILE) -> None:
        self.log_dir = log_dir
        self.node_name = node_name
        self.home = home
        self.lock_file = lock_file
        self.facts = hostfacts.detect()
        self.containerd_root = locate.cache_root() / "node" / "containerd"
        self.ip_range = podnet.NODE_IP_RANGES[0]
        self.cgroup_root = f"/{CGROUP_PARENT}"
        self.log_prefix = ""  # a second node's daemons log to <log_dir>/<node>-<daemon>.log
        self.containerd_state = home / "containerd"
        self.socket = home / "containerd.sock"
        self.kubelet_root = home / "kubelet"
        self.pod_logs_dir = home / "pod-logs"
        self.cni_conf_dir = home / "cni" / "net.d"
        self.cni_data_dir = home / "cni" / "networks"
        self.runc_root = home / "runc"
        self.config_dir = home / "config"
        self.state_file = home / "host-state.json"
        self.processes: list[ManagedProcess] = []
        self.kubelet: ManagedProcess | None = None
        self.kube_proxy: ManagedProcess | None = None
        self._kube_proxy_healthz = 0
        self.timings: dict[str, float] = {}
        self._lock_fd: int | None = None
        self._bins: Path | None = None

    # --- claim: the lock, the leftovers, the host network -----------------------
    def claim(self) -> None:
        """Takes the machine's node lock, sweeps what a crashed run left, sets up the bridge."""
        started = time.monotonic()
        if os.geteuid() != 0:
            raise NodeError("the real node needs root (network namespaces, iptables, cgroups, mounts)")
        self._bins = locate.node_bin_dir()
        self._take_lock()
        try:
            leftovers = self.sweep()
            if leftovers:
                log.warning("Swept leftovers of an earlier real node: %s", "; ".join(leftovers))
            nodehost.setup(self.facts, home=self.home, state_file=self.state_file)
        except BaseException:
            self._release_lock()
            raise
        self.timings["claim"] = time.monotonic() - started

    def _take_lock(self) -> None:
        self.lock_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise NodeBusyError(
                f"another test bed runs the real node on this machine ({holder}); it holds {self.lock_file}. "
                "Stop that one first (streamjob-testbed down, or end its test session): two real nodes "
                f"would share the bridge {BRIDGE}, {self.home} and the KUBE-* iptables chains."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, log dir {self.log_dir}".encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- sweep: remove everything a node may have left ----------------------------
    def sweep(self) -> list[str]:
        """Removes every trace of a real node on this machine (``testbed.nodehost.sweep``); safe to call
        at any time while holding the lock. Returns what it found (empty on a clean machine)."""
        roots = (self.containerd_root, self.containerd_root.with_name(SECOND_CONTAINERD))  # testbed.secondnode's too
        return nodehost.sweep(home=self.home, containerd_roots=roots, state_file=self.state_file,
                              pod_logs_dir=self.pod_logs_dir)

    # --- start ------------------------------------------------------------------------
    def start(self, *, api_url: str, certs: pki_mod.Pki, pki_dir: Path, admin_kubeconfig: Path, deadline: float) -> None:
        """Starts containerd, imports the images, then CoreDNS, kube-scheduler, kube-proxy, kubelet."""
        assert self._bins is not None, "claim() first"
        kubeconfigs = self._kubeconfigs(api_url, certs, pki_dir)
        self._install_rbac(admin_kubeconfig)
        self._start_runtime(deadline)

        # a first import of the runtime image takes minutes: the daemons get their own time
        t = time.monotonic()
        deadline = max(deadline, t + 120)
        self._start_coredns(kubeconfigs["coredns"], deadline)
        self._start_scheduler(kubeconfigs["scheduler"], deadline)
        self.kubelet = self._start_kubelet(kubeconfigs["kubelet"], certs)
        # kube-proxy waits for its Node (the kubelet registers it) before it serves /healthz
        self.kube_proxy = self._start_kube_proxy(kubeconfigs["proxy"])
        self.timings["daemons"] = time.monotonic() - t

    def _start_runtime(self, deadline: float) -> None:
        """The node's folders, containerd (forgetting a crashed run's containers), the images it lacks."""
        for d in (self.containerd_state, self.kubelet_root, self.pod_logs_dir, self.cni_conf_dir, self.cni_data_dir,
                  self.runc_root, self.config_dir, self.containerd_root):
            d.mkdir(parents=True, exist_ok=True)
        t = time.monotonic()
        self._start_containerd(deadline)
        self._forget_containers()
        self.timings["containerd"] = time.monotonic() - t
        t = time.monotonic()
        self.imported = self.import_images()
        self.timings["images"] = time.monotonic() - t

    def wait_ready(self, timeout: float = 60) -> None:
        """After the Node is Ready: kube-proxy has synced its rules once."""
        assert self.kube_proxy is not None
        self.kube_proxy.wait_ready(self._kube_proxy_healthy, timeout, "serving /healthz (rules synced)")

    def _kubeconfigs(self, api_url: str, certs: pki_mod.Pki, pki_dir: Path) -> dict[str, Path]:
        users = {
            "scheduler": pki_mod.client_cert(pki_dir, certs.ca, "kube-scheduler", "system:kube-scheduler"),
            "proxy": pki_mod.client_cert(pki_dir, certs.ca, "kube-proxy", "system:kube-proxy"),
            "coredns": pki_mod.client_cert(pki_dir, certs.ca, "coredns", COREDNS_USER),
        }
        names = {"scheduler": "system:kube-scheduler", "proxy": "system:kube-proxy", "coredns": COREDNS_USER}
        out = {
            key: kubeconfig_file.write(self.config_dir / f"{key}.kubeconfig", server=api_url, ca_file=certs.ca.cert,
                                       client=pair, user=names[key])
            for key, pair in users.items()
        }
        out["kubelet"] = kubeconfig_file.write(self.config_dir / "kubelet.kubeconfig", server=api_url, ca_file=certs.ca.cert,
                                               client=certs.kubelet, user=f"system:node:{self.node_name}")
        self.ca_file = certs.ca.cert
        return out

    def _install_rbac(self, admin_kubeconfig: Path) -> None:
        """CoreDNS's read access (kube-proxy and the scheduler have their default bindings)."""
        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        role, binding = nodeconfig.coredns_cluster_role(), nodeconfig.coredns_binding()
        with config.new_client_from_config(config_file=str(admin_kubeconfig)) as api:
            rbac = client.RbacAuthorizationV1Api(api)
            for create, body in ((rbac.create_cluster_role, role), (rbac.create_cluster_role_binding, binding)):
                try:
                    create(body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise

    def _bin(self, name: str) -> str:
        assert self._bins is not None
        return str(self._bins / name)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ManagedProcess:
        proc = ManagedProcess(name, argv, self.log_dir / f"{self.log_prefix}{name}.log", env=env, cwd=self.home)
        self.processes.append(proc)
        return proc

    # containerd --------------------------------------------------------------------
    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return hostops.run([self._bin("ctr"), "--address", str(self.socket), "--namespace", NAMESPACE, *args],
                           timeout=timeout, check=check)

    def _start_containerd(self, deadline: float) -> ManagedProcess:
        assert self._bins is not None
        config = self.config_dir / "containerd.toml"
        registry_dir = self.config_dir / "certs.d" / "_default"
        registry_dir.mkdir(parents=True, exist_ok=True)
        (registry_dir / "hosts.toml").write_text(nodeconfig.REGISTRY_HOSTS_TOML)
        config.write_text(nodeconfig.containerd_config(
            self.facts, root=self.containerd_root, state=self.containerd_state, socket=self.socket,
            opt_dir=self.home / "opt", registry_config_dir=self.config_dir / "certs.d",
            pause_image=nodeimages.pause_image(), runc=shutil.which("runc") or "/usr/sbin/runc",
            runc_root=self.runc_root, cni_bin_dir=self._bins / "cni", cni_conf_dir=self.cni_conf_dir,
        ))
        cni = nodeconfig.cni_config(data_dir=self.cni_data_dir, ip_range=self.ip_range)
        (self.cni_conf_dir / f"10-{CNI_NETWORK}.conflist").write_text(json.dumps(cni, indent=2))
        env = dict(os.environ)
        env["PATH"] = f"{self._bins}:{env.get('PATH', '')}"  # the shim is found beside containerd
        proc = self._spawn("containerd", [self._bin("containerd"), "--config", str(config)], env=env)

        def ready() -> bool:
            out = self.ctr("plugins", "ls", timeout=10, check=False)
            if out.returncode != 0:
                return False
            cri = [line for line in out.stdout.splitlines() if "io.containerd.grpc.v1" in line and " cri " in f" {line} "]
            if cri and "ok" not in cri[0].split():
                raise ComponentError(f"containerd's CRI plugin did not load: {cri[0]}; log {proc.log_path}:\n{tail(proc.log_path)}")
            return bool(cri)

        proc.wait_ready(ready, max(5.0, deadline - time.monotonic()), "serving its CRI plugin")
        return proc

    def task_ids(self) -> list[str]:
        """The ids of containerd's tasks (running, paused or stopped containers' processes)."""
        return [line.split()[0] for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:] if line.strip()]

    def _forget_containers(self) -> None:
        """Containers and sandboxes a crashed run left in containerd's metadata (its image store is kept)."""
        for task in self.task_ids():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
            self.ctr("tasks", "delete", "--force", task, check=False)
        containers = self.ctr("containers", "ls", "-q", check=False).stdout.split()
        if containers:
            self.ctr("containers", "delete", *containers, check=False)
        sandboxes = [line.split()[0] for line in self.ctr("sandboxes", "ls", check=False).stdout.splitlines()[1:] if line.strip()]
        for sandbox in sandboxes:
            self.ctr("sandboxes", "rm", "--force", sandbox, check=False)

    # images --------------------------------------------------------------------------
    def busybox_image(self) -> str:
        assert self._bins is not None
        return nodeimages.busybox_image(self._bins)

    def tag_image(self, source: str, *names: str) -> None:
        """Names ``source`` (an image in this node's store) also as each of ``names``, as a registry's tags would:
        a pod naming one of them runs ``source``'s image. Moves a name that pointed elsewhere."""
        for name in names:
            self.ctr("images", "tag", "--force", source, name)

    def run_image(self, image: str, command: list[str], *, env: dict[str, str] | None = None,
                  mounts: tuple[tuple[str, str, bool], ...] = (), timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``docker run --rm --read-only --network host IMAGE COMMAND`` through this node's containerd and runc: the
        image's user, environment and working directory, its root read-only; ``mounts`` are (host path, path in the
        container, read-only). The container's cgroup is under the node's, which the sweep removes."""
        cid = f"run-{uuid.uuid4().hex[:12]}"
        args = ["run", "--rm", "--read-only", "--net-host", "--cgroup", f"{self.cgroup_root}/{cid}"]
        for key, value in (env or {}).items():
            args += ["--env", f"{key}={value}"]
        for source, target, read_only in mounts:
            args += ["--mount", f"type=bind,src={source},dst={target},options=rbind:{'ro' if read_only else 'rw'}"]
        result = self.ctr(*args, image, cid, *command, timeout=timeout, check=False)
        # the container's stderr, without ctr's own log lines (its cgroup v1 deprecation warning, say)
        result.stderr = "".join(line for line in result.stderr.splitlines(keepends=True) if not CTR_LOG_LINE.match(line))
        return result

    def import_images(self) -> list[str]:
        """Imports what containerd lacks, once per image id (``testbed.nodeimages``); returns the names imported."""
        assert self._bins is not None
        return nodeimages.import_images(self.ctr, self._bins, self.containerd_root)

    # CoreDNS, scheduler, kube-proxy ----------------------------------------------------
    def _start_coredns(self, kubeconfig: Path, deadline: float) -> None:
        ready_port, health_port = free_port(), free_port()
        corefile = self.config_dir / "Corefile"
        corefile.write_text(nodeconfig.corefile(kubeconfig=kubeconfig, ready_port=ready_port, health_port=health_port))
        proc = self._spawn("coredns", [self._bin("coredns"), "-conf", str(corefile)])

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ready_port}/ready", timeout=2) as response:
                return response.status == 200

        proc.wait_ready(ready, max(5.0, deadline - time.monotonic()), "ready (its kubernetes plugin synced)")

    def _start_scheduler(self, kubeconfig: Path, deadline: float) -> None:
        from testbed.control_plane import https_status

        port = free_port()
        proc = self._spawn("kube-scheduler", [
            self._bin("kube-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--v=1",
        ])
        proc.wait_ready(lambda: https_status(f"https://127.0.0.1:{port}/healthz") == 200,
                        max(5.0, deadline - time.monotonic()), "healthy (/healthz)")

    def _start_kube_proxy(self, kubeconfig: Path) -> ManagedProcess:
        healthz, metrics = free_port(), free_port()
        self._kube_proxy_healthz = healthz
        config = nodeconfig.kube_proxy_config(kubeconfig=kubeconfig, node_name=self.node_name, healthz_port=healthz,
                                              metrics_port=metrics, oom_score_adj=self._oom_score_adj())
        path = self.config_dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return self._spawn("kube-proxy", [self._bin("kube-proxy"), f"--config={path}", "--v=1"])

    def _kube_proxy_healthy(self) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self._kube_proxy_healthz}/healthz", timeout=2) as response:
            return bool(response.status == 200)

    def _oom_score_adj(self) -> int:
        """-999 as usual, or this process's own value when it may not lower it (no CAP_SYS_RESOURCE)."""
        if self.facts.cap_sys_resource:
            return -999
        try:
            return int(Path("/proc/self/oom_score_adj").read_text())
        except (OSError, ValueError):
            return 0

    # kubelet ------------------------------------------------------------------------
    def _start_kubelet(self, kubeconfig: Path, certs: pki_mod.Pki) -> ManagedProcess:
        port, healthz_port = free_port(), free_port()
        path = self.config_dir / "kubelet.yaml"
        resolv = self.config_dir / "resolv.conf"
        resolv.write_text(nodeconfig.resolv_conf())
        config = nodeconfig.kubelet_config(
            self.facts, certs, port=port, healthz_port=healthz_port, socket=self.socket, cgroup_root=self.cgroup_root,
            resolv_file=resolv, pod_logs_dir=self.pod_logs_dir, oom_score_adj=self._oom_score_adj(),
        )
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        env = dict(os.environ)
        env["PATH"] = f"{self._bins}:{env.get('PATH', '')}"
        return self._spawn("kubelet", [
            self._bin("kubelet"),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--hostname-override={self.node_name}",
            f"--node-ip={BRIDGE_IP}",
            f"--node-labels={NODE_LABEL}=true",  # the test bed's nodes: tests' nodeSelectors match it
            "--v=1",
        ], env=env)

    @property
    def running(self) -> bool:
        """Claimed and not stopped yet."""
        return self._lock_fd is not None

    # --- stop ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Stops the daemons, lets containerd forget its containers, then sweeps; releases the lock."""
        if self._lock_fd is None:
            return
        started = time.monotonic()
        try:
            by_name = {p.name: p for p in self.processes}
            for name in ("kubelet", "kube-proxy", "kube-scheduler", "coredns"):
                if name in by_name:
                    by_name[name].stop(timeout=10)
            containerd = by_name.get("containerd")
            if containerd is not None and containerd.alive():
                try:
                    self._forget_containers()
                except Exception as exc:  # the sweep below kills and unmounts anyway
                    log.warning("containerd did not forget its containers error=%s", exc)
                containerd.stop(timeout=15)
            self.processes.clear()
            self.sweep()
        finally:
            self._release_lock()
        self.timings["stop"] = time.monotonic() - started
        log.info("Stopped the real node seconds=%.1f", self.timings["stop"])

