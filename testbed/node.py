"""The test bed's real node: containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS, CNI bridge networking.

Called by ``testbed.cluster.TestBed`` when it is asked for ``node="real"``: ``claim()``
before the control plane (the API server binds to the bridge's address, where pods
reach it), ``start()`` once the API server is up, ``stop()`` at the end. Binaries and
small images come from ``testbed/build/build-node.sh`` (``locate.node_bin_dir()``).

What it changes on this machine, and undoes at ``stop()`` (or, after a crash, at the
next ``claim()``, which sweeps the leftovers first):

- a bridge ``sjnode0`` with 10.244.0.1/24 (the pods' range 10.244.0.0/24): pods reach
  the API server, CoreDNS and each other on it; nothing is routed off it (a mangle
  FORWARD chain drops whatever would leave or enter the bridge through another
  interface), and no MASQUERADE is configured by us (kube-proxy's only rewrites
  Service traffic to pods); CoreDNS answers the cluster zone and NXDOMAIN for the rest;
  containerd may pull from no registry (every host is 127.0.0.1:1);
- the bridge's loopback alias 127.244.0.1 (a nat OUTPUT rule to 10.244.0.1, which host
  clients dial instead of the bridge) and a guard in filter OUTPUT rejecting pod- and
  Service-range packets that would leave on any other interface (``testbed.podnet``);
- ``net.ipv4.ip_forward=1`` (a pod reaching a Service whose endpoint is another pod on
  the bridge is routed back onto it), restored to its former value;
- cgroups under ``/streamjob-node`` in every hierarchy (the kubelet's ``cgroupRoot``);
- iptables and ip6tables chains named ``KUBE-*`` (kubelet, kube-proxy), ``CNI-*``
  (portmap) and ``STREAMJOB-*`` (ours), in filter, nat, mangle and raw;
- everything under ``NODE_HOME`` (/var/lib/streamjob-testbed-node): containerd's state
  and socket, runc's state, the kubelet's root (pod volumes), pod logs, CNI config and
  IP allocations, network namespaces (containerd's ``netns_mounts_under_state_dir``),
  and every mount below it;
- ``/run/containerd`` (where containerd's shims put their sockets, whatever the config
  says) and ``/var/log/containers`` (the kubelet's symlinks), when they were not there.

Kept across runs, in the cache: containerd's image store (``<cache>/node/containerd``),
so an image is imported once; a stop leaves only images in it.

Only one real node runs on a machine: a lock file (``LOCK_FILE``) is held from
``claim()`` to the end of ``stop()``; a second test bed gets ``NodeBusyError``
naming the holder, and changes nothing.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from testbed import hostfacts, imagestore, locate, podnet
from testbed import kubeconfig as kubeconfig_file
from testbed import pki as pki_mod
from testbed.proc import ComponentError, ManagedProcess, free_port, tail

log = logging.getLogger(__name__)

NODE_HOME = Path(os.environ.get("STREAMJOB_NODE_DIR") or "/var/lib/streamjob-testbed-node")
LOCK_FILE = Path(os.environ.get("STREAMJOB_NODE_LOCK") or "/run/lock/streamjob-testbed-node.lock")
BRIDGE, POD_SUBNET, BRIDGE_IP = podnet.BRIDGE, podnet.POD_SUBNET, podnet.BRIDGE_IP
BRIDGE_PREFIX = 24
CNI_NETWORK = "streamjob-pods"
CGROUP_PARENT = "streamjob-node"
CHAIN = "STREAMJOB-NODE"
CHAIN_PREFIXES = ("KUBE-", "CNI-", "STREAMJOB-")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
CLUSTER_DOMAIN = "cluster.local"
NAMESPACE = "k8s.io"  # containerd's namespace for the CRI
HOST_DIRS_MAYBE_CREATED = (Path("/run/containerd"), Path("/var/log/containers"))
COREDNS_USER = "streamjob-testbed:coredns"

MNT_DETACH = 2


class NodeError(RuntimeError):
    """The real node could not be set up or torn down; the message says what and why."""


class NodeBusyError(NodeError):
    """Another test bed holds this machine's real node."""


def _run(argv: list[str], *, check: bool = True, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()[-2000:]}")
    return result


def _write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", *name.split(".")).write_text(value)


def _read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


def _unescape_mount(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(*roots: Path) -> list[str]:
    """Mount points at or below any of ``roots``, deepest first (from /proc/self/mountinfo)."""
    prefixes = [str(r.resolve()) if r.exists() else str(r) for r in roots]
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = _unescape_mount(line.split()[4])
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


def cgroup_mount_points() -> list[Path]:
    """Every cgroup (v1 or v2) hierarchy's mount point on this machine."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] in (["cgroup"], ["cgroup2"]):
            points.append(Path(_unescape_mount(left.split()[4])))
    return points


def iptables_chains(binary: str, table: str) -> list[str]:
    """Chains of ``table`` whose names start with one of CHAIN_PREFIXES."""
    result = _run([binary, "-w", "5", "-t", table, "-S"], check=False)
    chains = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-N" and parts[1].startswith(CHAIN_PREFIXES):
            chains.append(parts[1])
    return chains


def _sweep_iptables() -> list[str]:
    """Deletes the jumps to, then the rules of, then every KUBE-/CNI-/STREAMJOB- chain (IPv4 and IPv6)."""
    removed = []
    for binary in ("iptables", "ip6tables"):
        if not shutil.which(binary):
            continue
        for table in IPTABLES_TABLES:
            chains = iptables_chains(binary, table)
            if not chains:
                continue
            # rules in other chains (built-in ones included) that jump to ours
            listing = _run([binary, "-w", "5", "-t", table, "-S"], check=False).stdout.splitlines()
            for line in listing:
                parts = shlex.split(line)  # comments are quoted
                if parts[:1] == ["-A"] and parts[1] not in chains and "-j" in parts:
                    target = parts[parts.index("-j") + 1]
                    if target.startswith(CHAIN_PREFIXES):
                        _run([binary, "-w", "5", "-t", table, "-D", *parts[1:]], check=False)
            for chain in chains:
                _run([binary, "-w", "5", "-t", table, "-F", chain], check=False)
            for chain in chains:
                _run([binary, "-w", "5", "-t", table, "-X", chain], check=False)
            removed += [f"{binary}/{table}/{c}" for c in chains]
    return removed


def nft_tables() -> list[tuple[str, str]]:
    """(family, name) of every nftables table; empty without the nft tool."""
    if not shutil.which("nft"):
        return []
    out = _run(["nft", "list", "tables"], check=False).stdout
    return [(p[1], p[2]) for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[0] == "table"]


def nft_table_is_empty(family: str, table: str) -> bool:
    """No rule in any chain of the table (its base chains may remain)."""
    out = _run(["nft", "-j", "list", "table", family, table], check=False).stdout
    try:
        items = json.loads(out)["nftables"]
    except (ValueError, KeyError):
        return False
    return not any("rule" in item or "set" in item or "map" in item for item in items)


def _argv_mentions(pid: int, roots: Iterable[str]) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    for arg in argv:
        text = arg.decode(errors="replace")
        for root in roots:
            if text.startswith(root + "/") or ("=" + root + "/") in text or text == root:
                return True
    return False


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _cgroup_pids(cgroup_dirs: Iterable[Path]) -> set[int]:
    pids: set[int] = set()
    for top in cgroup_dirs:
        if not top.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    text = (Path(dirpath) / "cgroup.procs").read_text()
                except OSError:
                    continue
                pids.update(int(x) for x in text.split())
    return pids


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        if pid in (os.getpid(), 1):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _umount(path: str) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.umount2(path.encode(), MNT_DETACH) == 0


def _rmdir_tree(top: Path) -> None:
    """rmdir a cgroup directory tree, leaves first (cgroup dirs hold only virtual files)."""
    if not top.is_dir():
        return
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


class RealNode:
    """One real node on this machine; see the module docstring for what it touches."""

    def __init__(self, log_dir: Path, node_name: str, *, home: Path = NODE_HOME, lock_file: Path = LOCK_FILE) -> None:
        self.log_dir = log_dir
        self.node_name = node_name
        self.home = home
        self.lock_file = lock_file
        self.facts = hostfacts.detect()
        self.containerd_root = locate.cache_root() / "node" / "containerd"
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
            self._setup_host()
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

    def _setup_host(self) -> None:
        facts = self.facts
        if facts.iptables_backend == "":
            raise NodeError("iptables is missing: apt-get install iptables (kube-proxy and the CNI portmap plugin need it)")
        # what is changed on the host, recorded before it is changed: the sweep restores it
        state: dict[str, Any] = {
            "sysctls": {name: _read_sysctl(name) for name in ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables")},
            "created_dirs": [str(d) for d in HOST_DIRS_MAYBE_CREATED if not d.exists()],
            # iptables-nft creates a table on first use; an empty one we created goes at the end
            "nft_tables": nft_tables(),
        }
        self.home.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps(state, indent=2))
        if state["sysctls"]["net.bridge.bridge-nf-call-iptables"] is None:
            _run(["modprobe", "br_netfilter"], check=False)
            if _read_sysctl("net.bridge.bridge-nf-call-iptables") is None:
                raise NodeError("the br_netfilter module is not loaded and cannot be (modprobe br_netfilter): "
                                "kube-proxy's Service rules would not see traffic between pods on the bridge")
        _write_sysctl("net.bridge.bridge-nf-call-iptables", "1")
        _write_sysctl("net.ipv4.ip_forward", "1")

        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "add", f"{BRIDGE_IP}/{BRIDGE_PREFIX}", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])
        # Nothing in or out of the bridge but to and from it: pods talk to each other and to
        # this machine (INPUT/OUTPUT), never through it to another network. mangle FORWARD
        # runs before filter FORWARD, where kube-proxy and the kubelet insert their ACCEPTs.
        for args in (
            ["-N", CHAIN],
            ["-A", CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
            ["-A", CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP"],
            ["-I", "FORWARD", "1", "-j", CHAIN],
        ):
            _run(["iptables", "-w", "5", "-t", "mangle", *args])
        # the host's clients reach the servers on the bridge through a loopback alias, and
        # nothing for the pod or Service range leaves through another interface (testbed.podnet)
        podnet.install(_run)

        for top in self._cgroup_tops():
            top.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: a child starts empty
                if (top / name).exists() and not (top / name).read_text().strip():
                    (top / name).write_text((top.parent / name).read_text())
        if facts.cgroup_version == 2:
            controllers = (hostfacts.CGROUP_ROOT / "cgroup.controllers").read_text().split()
            wanted = " ".join(f"+{c}" for c in controllers if c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb"))
            for path in (hostfacts.CGROUP_ROOT / "cgroup.subtree_control", hostfacts.CGROUP_ROOT / CGROUP_PARENT / "cgroup.subtree_control"):
                path.write_text(wanted)

    def _cgroup_tops(self) -> list[Path]:
        if self.facts.cgroup_version == 2:
            return [hostfacts.CGROUP_ROOT / CGROUP_PARENT]
        return [Path(p) / CGROUP_PARENT for p in sorted(set(self.facts.cgroup_v1_hierarchies.values()))]

    # --- sweep: remove everything a node may have left ----------------------------
    def sweep(self) -> list[str]:
        """Removes every trace of a real node on this machine; safe to call at any time while
        holding the lock. Returns what it found (empty on a clean machine)."""
        found: list[str] = []
        roots = [str(self.home), str(self.containerd_root)]
        # 1. the node's daemons and containerd's shims (their argv names our paths)
        for _attempt in range(20):
            ours = [pid for pid in _pids() if pid != os.getpid() and _argv_mentions(pid, roots)]
            if not ours:
                break
            found.append(f"processes {ours}")
            _kill(ours)
            time.sleep(0.1)
        # 2. the pods' processes, by cgroup
        cgroup_tops = [p / CGROUP_PARENT for p in cgroup_mount_points()]
        for _attempt in range(50):
            pids = _cgroup_pids(cgroup_tops)
            if not pids:
                break
            found.append(f"pod processes {sorted(pids)[:10]}")
            _kill(pids)
            time.sleep(0.1)
        # 3. mounts: container root filesystems, /dev/shm of sandboxes, network namespaces,
        #    the kubelet's volumes and its own bind mount
        for _attempt in range(5):
            points = mounts_under(self.home, self.containerd_root)
            if not points:
                break
            found.append(f"{len(points)} mounts")
            for point in points:
                _umount(point)
        left = mounts_under(self.home, self.containerd_root)
        if left:
            raise NodeError(f"could not unmount {left[:5]}: not removing {self.home} (it could delete through a mount)")
        # 4. cgroups
        for top in cgroup_tops:
            if top.is_dir():
                found.append(f"cgroup {top}")
                _rmdir_tree(top)
        # 5. the bridge (a pod's veth goes with its network namespace)
        if Path(f"/sys/class/net/{BRIDGE}").exists():
            found.append(f"bridge {BRIDGE}")
            _run(["ip", "link", "del", BRIDGE], check=False)
        # 6. iptables chains
        chains = _sweep_iptables()
        if chains:
            found.append(f"{len(chains)} iptables chains")
        # 7. the host's settings and directories, as they were before the node
        if self.state_file.exists():
            state = json.loads(self.state_file.read_text())
            for name, value in (state.get("sysctls") or {}).items():
                if value is not None and _read_sysctl(name) != value:
                    _write_sysctl(name, value)
                    found.append(f"sysctl {name} restored to {value}")
            for directory in state.get("created_dirs") or []:
                path = Path(directory)
                if path == Path("/var/log/containers") and path.is_dir():
                    for link in path.iterdir():
                        if link.is_symlink() and os.readlink(link).startswith(str(self.pod_logs_dir)):
                            link.unlink()
                    if not any(path.iterdir()):
                        path.rmdir()
                elif path.exists():
                    shutil.rmtree(path, ignore_errors=True)
            before = {tuple(t) for t in state.get("nft_tables") or []}
            for family, table in nft_tables():
                if (family, table) not in before and nft_table_is_empty(family, table):
                    _run(["nft", "delete", "table", family, table], check=False)
                    found.append(f"empty nft table {family} {table}")
        # 8. the node's own folder
        if self.home.exists():
            found.append(f"folder {self.home}")
            shutil.rmtree(self.home, ignore_errors=True)
        return found

    # --- start ------------------------------------------------------------------------
    def start(self, *, api_url: str, certs: pki_mod.Pki, pki_dir: Path, admin_kubeconfig: Path, deadline: float) -> None:
        """Starts containerd, imports the images, then CoreDNS, kube-scheduler, kube-proxy, kubelet."""
        assert self._bins is not None, "claim() first"
        for d in (self.containerd_state, self.kubelet_root, self.pod_logs_dir, self.cni_conf_dir, self.cni_data_dir,
                  self.runc_root, self.config_dir, self.containerd_root):
            d.mkdir(parents=True, exist_ok=True)
        kubeconfigs = self._kubeconfigs(api_url, certs, pki_dir)
        self._install_rbac(admin_kubeconfig)

        t = time.monotonic()
        self._start_containerd(deadline)
        self._forget_containers()
        self.timings["containerd"] = time.monotonic() - t
        t = time.monotonic()
        self.imported = self.import_images()
        self.timings["images"] = time.monotonic() - t

        # a first import of the runtime image takes minutes: the daemons get their own time
        t = time.monotonic()
        deadline = max(deadline, t + 120)
        self._start_coredns(kubeconfigs["coredns"], deadline)
        self._start_scheduler(kubeconfigs["scheduler"], deadline)
        self.kubelet = self._start_kubelet(kubeconfigs["kubelet"], certs)
        # kube-proxy waits for its Node (the kubelet registers it) before it serves /healthz
        self.kube_proxy = self._start_kube_proxy(kubeconfigs["proxy"])
        self.timings["daemons"] = time.monotonic() - t

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

        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": COREDNS_USER},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "namespaces", "pods"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": COREDNS_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": COREDNS_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER}],
        }
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
        proc = ManagedProcess(name, argv, self.log_dir / f"{name}.log", env=env, cwd=self.home)
        self.processes.append(proc)
        return proc

    # containerd --------------------------------------------------------------------
    def containerd_config(self) -> str:
        bins = self._bins
        assert bins is not None
        runc = shutil.which("runc") or "/usr/sbin/runc"
        registry_dir = self.config_dir / "certs.d" / "_default"
        registry_dir.mkdir(parents=True, exist_ok=True)
        # no registry is reachable, and none may be tried: every host resolves to a closed loopback port
        (registry_dir / "hosts.toml").write_text('server = "http://127.0.0.1:1"\n')
        oom = "true" if not self.facts.cap_sys_resource else "false"
        return f"""version = 3
root = '{self.containerd_root}'
state = '{self.containerd_state}'
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '{self.socket}'

[ttrpc]
  address = '{self.socket}.ttrpc'

[debug]
  level = 'info'

[metrics]
  address = ''

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = '{self.home / "opt"}'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{self.pause_image()}'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = '{self.config_dir / "certs.d"}'
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
          Root = '{self.runc_root}'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{bins / "cni"}']
      conf_dir = '{self.cni_conf_dir}'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
"""

    def cni_config(self) -> dict[str, Any]:
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
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": BRIDGE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.cni_data_dir),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
            ],
        }

    def ctr(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run([self._bin("ctr"), "--address", str(self.socket), "--namespace", NAMESPACE, *args], timeout=timeout, check=check)

    def _start_containerd(self, deadline: float) -> ManagedProcess:
        config = self.config_dir / "containerd.toml"
        config.write_text(self.containerd_config())
        (self.cni_conf_dir / f"10-{CNI_NETWORK}.conflist").write_text(json.dumps(self.cni_config(), indent=2))
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

    def _forget_containers(self) -> None:
        """Containers and sandboxes a crashed run left in containerd's metadata (its image store is kept)."""
        tasks = [line.split()[0] for line in self.ctr("tasks", "ls", check=False).stdout.splitlines()[1:] if line.strip()]
        for task in tasks:
            self.ctr("tasks", "kill", "--signal", "SIGKILL", task, check=False)
            self.ctr("tasks", "delete", "--force", task, check=False)
        containers = self.ctr("containers", "ls", "-q", check=False).stdout.split()
        if containers:
            self.ctr("containers", "delete", *containers, check=False)
        sandboxes = [line.split()[0] for line in self.ctr("sandboxes", "ls", check=False).stdout.splitlines()[1:] if line.strip()]
        for sandbox in sandboxes:
            self.ctr("sandboxes", "rm", "--force", sandbox, check=False)

    # images --------------------------------------------------------------------------
    def pause_image(self) -> str:
        return f"registry.k8s.io/pause:{locate.node_pin('PAUSE_VERSION')}"

    def busybox_image(self) -> str:
        assert self._bins is not None
        return (self._bins / "images" / "busybox.name").read_text().strip()

    def image_names(self) -> set[str]:
        return {line.split()[0] for line in self.ctr("images", "ls").stdout.splitlines()[1:] if line.strip()}

    def import_images(self) -> list[str]:
        """pause and busybox (build-node.sh's archives), and the images scripts/build-images.sh built
        (the runtime and operator), each imported once per image id into containerd's k8s.io namespace."""
        assert self._bins is not None
        stamps = self.containerd_root.parent / "imported"
        stamps.mkdir(parents=True, exist_ok=True)
        present = self.image_names()
        log.info("Images in containerd images=%s", sorted(present))
        imported = []

        def needed(name: str, identity: str) -> bool:
            stamp = stamps / name.replace("/", "_").replace(":", "_")
            return not (name in present and stamp.exists() and stamp.read_text() == identity)

        def done(name: str, identity: str) -> None:
            (stamps / name.replace("/", "_").replace(":", "_")).write_text(identity)
            imported.append(name)

        for archive, name in ((self._bins / "images" / "pause.oci.tar", self.pause_image()),
                              (self._bins / "images" / "busybox.oci.tar", self.busybox_image())):
            identity = f"{archive.stat().st_size}-{archive.stat().st_mtime_ns}"
            if needed(name, identity):
                self._import_archive(archive, name)
                done(name, identity)
        if imagestore.available():
            for name in (imagestore.runtime_image(), imagestore.operator_image()):
                stored = imagestore.inspect(name)
                if stored is None or not needed(name, stored.image_id):
                    continue
                tmp = imagestore.store_dir() / "tmp" / f"export-{stored.image_id[:16]}.oci.tar"
                tmp.parent.mkdir(parents=True, exist_ok=True)
                tmp.unlink(missing_ok=True)
                try:
                    imagestore.push_archive(name, tmp)
                    self._import_archive(tmp, name)
                finally:
                    tmp.unlink(missing_ok=True)
                done(name, stored.image_id)
        return imported

    def _import_archive(self, archive: Path, name: str) -> None:
        started = time.monotonic()
        self.ctr("images", "import", "--platform", "linux/amd64", "--snapshotter", "overlayfs", str(archive), timeout=900)
        names = self.image_names()
        if name not in names:
            raise NodeError(f"ctr images import {archive} did not create {name} (images now: {sorted(names)})")
        log.info("Imported image=%s seconds=%.1f", name, time.monotonic() - started)

    # CoreDNS, scheduler, kube-proxy ----------------------------------------------------
    def _start_coredns(self, kubeconfig: Path, deadline: float) -> None:
        ready_port, health_port = free_port(), free_port()
        corefile = self.config_dir / "Corefile"
        # The cluster zone from the API; every other name NXDOMAIN: nothing is forwarded off the machine.
        corefile.write_text(f"""{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{
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
""")
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
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.node_name,
            "bindAddress": BRIDGE_IP,
            "healthzBindAddress": f"127.0.0.1:{healthz}",
            "metricsBindAddress": f"127.0.0.1:{metrics}",
            "mode": "iptables",
            "clusterCIDR": POD_SUBNET,
            "detectLocalMode": "ClusterCIDR",
            # NodePorts only on the bridge's address: nothing listens on this machine's other interfaces
            "nodePortAddresses": [f"{BRIDGE_IP}/32"],
            "iptables": {"syncPeriod": "30s", "minSyncPeriod": "0s", "localhostNodePorts": False},
            # leave the host's conntrack sysctls alone
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "oomScoreAdj": self._oom_score_adj(),
        }
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
    def kubelet_config(self, certs: pki_mod.Pki, port: int, healthz_port: int) -> dict[str, Any]:
        facts = self.facts
        resolv = self.config_dir / "resolv.conf"
        # pods with dnsPolicy Default get this: the node's DNS only, nothing off the machine
        resolv.write_text(f"nameserver {BRIDGE_IP}\n")
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
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_PARENT}",
            # cgroup v1 is deprecated in the kubelet: it refuses to start on it unless told
            "failCgroupV1": facts.cgroup_version == 2,
            "failSwapOn": False,
            "clusterDNS": [BRIDGE_IP],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(resolv),
            "podLogsDir": str(self.pod_logs_dir),
            "oomScoreAdj": self._oom_score_adj(),
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

    def _start_kubelet(self, kubeconfig: Path, certs: pki_mod.Pki) -> ManagedProcess:
        port, healthz_port = free_port(), free_port()
        path = self.config_dir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(self.kubelet_config(certs, port, healthz_port), sort_keys=False))
        env = dict(os.environ)
        env["PATH"] = f"{self._bins}:{env.get('PATH', '')}"
        return self._spawn("kubelet", [
            self._bin("kubelet"),
            f"--config={path}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.kubelet_root}",
            f"--hostname-override={self.node_name}",
            f"--node-ip={BRIDGE_IP}",
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

