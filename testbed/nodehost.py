"""What the real node changes on this machine, and the sweep that undoes it.

Called by ``testbed.node.RealNode``: ``setup()`` at ``claim()``, once the lock is held and
the leftovers are swept; ``sweep()`` at ``claim()`` (after a crash) and at the end of
``stop()``. The low-level reads and removals are ``testbed.hostops``'s.

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
- cgroups under ``/streamjob-node`` in every hierarchy (the kubelet's ``cgroupRoot``), weighted as this
  machine's CPUs against host processes (``weigh_as_the_machines_cpus``);
- iptables and ip6tables chains named ``KUBE-*`` (kubelet, kube-proxy), ``CNI-*``
  (portmap) and ``STREAMJOB-*`` (ours), in filter, nat, mangle and raw;
- everything under the node's home (``testbed.node.NODE_HOME``,
  /var/lib/streamjob-testbed-node): containerd's state and socket, runc's state, the
  kubelet's root (pod volumes), pod logs, CNI config and IP allocations, network
  namespaces (containerd's ``netns_mounts_under_state_dir``), and every mount below it;
- ``/run/containerd`` (where containerd's shims put their sockets, whatever the config
  says) and ``/var/log/containers`` (the kubelet's symlinks), when they were not there.

What ``setup()`` changes is recorded first, in the node's ``host-state.json``: the
sweep restores the sysctls and removes the directories and nft tables it did not find.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from testbed import hostfacts, hostops, podnet
from testbed.hostops import NodeError
from testbed.podnet import BRIDGE, BRIDGE_IP

BRIDGE_PREFIX = 24
CGROUP_PARENT = "streamjob-node"
CHAIN = "STREAMJOB-NODE"
HOST_DIRS_MAYBE_CREATED = (Path("/run/containerd"), Path("/var/log/containers"))


def setup(facts: hostfacts.HostFacts, *, home: Path, state_file: Path) -> None:
    """Records the host's settings in ``state_file``, then sets up the bridge, its chains, the sysctls and the cgroups."""
    if facts.iptables_backend == "":
        raise NodeError("iptables is missing: apt-get install iptables (kube-proxy and the CNI portmap plugin need it)")
    # what is changed on the host, recorded before it is changed: the sweep restores it
    state: dict[str, Any] = {
        "sysctls": {name: hostops.read_sysctl(name) for name in ("net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables")},
        "created_dirs": [str(d) for d in HOST_DIRS_MAYBE_CREATED if not d.exists()],
        # iptables-nft creates a table on first use; an empty one we created goes at the end
        "nft_tables": hostops.nft_tables(),
    }
    home.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, indent=2))
    if state["sysctls"]["net.bridge.bridge-nf-call-iptables"] is None:
        hostops.run(["modprobe", "br_netfilter"], check=False)
        if hostops.read_sysctl("net.bridge.bridge-nf-call-iptables") is None:
            raise NodeError("the br_netfilter module is not loaded and cannot be (modprobe br_netfilter): "
                            "kube-proxy's Service rules would not see traffic between pods on the bridge")
    hostops.write_sysctl("net.bridge.bridge-nf-call-iptables", "1")
    hostops.write_sysctl("net.ipv4.ip_forward", "1")

    hostops.run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    hostops.run(["ip", "addr", "add", f"{BRIDGE_IP}/{BRIDGE_PREFIX}", "dev", BRIDGE])
    hostops.run(["ip", "link", "set", BRIDGE, "up"])
    # Nothing in or out of the bridge but to and from it: pods talk to each other and to
    # this machine (INPUT/OUTPUT), never through it to another network. mangle FORWARD
    # runs before filter FORWARD, where kube-proxy and the kubelet insert their ACCEPTs.
    for args in (
        ["-N", CHAIN],
        ["-A", CHAIN, "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
        ["-A", CHAIN, "!", "-i", BRIDGE, "-o", BRIDGE, "-j", "DROP"],
        ["-I", "FORWARD", "1", "-j", CHAIN],
    ):
        hostops.run(["iptables", "-w", "5", "-t", "mangle", *args])
    # the host's clients reach the servers on the bridge through a loopback alias, and
    # nothing for the pod or Service range leaves through another interface (testbed.podnet)
    podnet.install(hostops.run)

    if facts.cgroup_version == 2:  # the root hands the pods' controllers down
        (hostfacts.CGROUP_ROOT / "cgroup.subtree_control").write_text(_v2_controllers())
    make_cgroup_parent(facts, CGROUP_PARENT)
    weigh_as_the_machines_cpus(facts, CGROUP_PARENT)


def weigh_as_the_machines_cpus(facts: hostfacts.HostFacts, parent: str) -> None:
    """Gives the node's cgroup the CPU weight of this machine's CPUs. A new cgroup weighs as much as one host
    process (v1 ``cpu.shares`` 1024, v2 ``cpu.weight`` 100), so every pod together got one process's share of the
    CPUs whenever the host was busy (the operator on the host, the API server, a test's Spark); a node's kubelet
    gives its ``kubepods`` the weight of its allocatable CPUs, and so does this, one level up."""
    cpus = os.cpu_count() or 1
    for top in _cgroup_tops(facts, parent):
        if facts.cgroup_version == 2 and (top / "cpu.weight").exists():
            (top / "cpu.weight").write_text(str(min(10000, 100 * cpus)))
        elif (top / "cpu.shares").exists():
            (top / "cpu.shares").write_text(str(1024 * cpus))


def make_cgroup_parent(facts: hostfacts.HostFacts, parent: str) -> None:
    """The cgroup ``parent`` (``streamjob-node``, or a second node's ``streamjob-node/<name>``) in every
    hierarchy, ready for a kubelet's ``cgroupRoot``: v1 cpuset copied from above (a child starts empty), v2
    the pods' controllers handed down to its children."""
    for top in _cgroup_tops(facts, parent):
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):  # v1 cpuset: a child starts empty
            if (top / name).exists() and not (top / name).read_text().strip():
                (top / name).write_text((top.parent / name).read_text())
        if facts.cgroup_version == 2:
            (top / "cgroup.subtree_control").write_text(_v2_controllers())


def _v2_controllers() -> str:
    controllers = (hostfacts.CGROUP_ROOT / "cgroup.controllers").read_text().split()
    return " ".join(f"+{c}" for c in controllers if c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb"))


def _cgroup_tops(facts: hostfacts.HostFacts, parent: str) -> list[Path]:
    if facts.cgroup_version == 2:
        return [hostfacts.CGROUP_ROOT / parent]
    return [Path(p) / parent for p in sorted(set(facts.cgroup_v1_hierarchies.values()))]


def sweep(*, home: Path, containerd_roots: tuple[Path, ...], state_file: Path, pod_logs_dir: Path) -> list[str]:
    """Removes every trace of a real node (and of a second node, whose home is below ``home``) on this
    machine; safe to call at any time while holding the lock. Returns what it found (empty on a clean machine)."""
    found: list[str] = []
    roots = [str(home), *map(str, containerd_roots)]
    # 1. the node's daemons and containerd's shims (their argv names our paths)
    for _attempt in range(20):
        ours = [pid for pid in hostops.all_pids() if pid != os.getpid() and hostops.argv_mentions(pid, roots)]
        if not ours:
            break
        found.append(f"processes {ours}")
        hostops.kill(ours)
        time.sleep(0.1)
    # 2. the pods' processes, by cgroup
    cgroup_tops = [p / CGROUP_PARENT for p in hostops.cgroup_mount_points()]
    for _attempt in range(50):
        pids = hostops.cgroup_pids(cgroup_tops)
        if not pids:
            break
        found.append(f"pod processes {sorted(pids)[:10]}")
        hostops.kill(pids)
        time.sleep(0.1)
    # 3. mounts: container root filesystems, /dev/shm of sandboxes, network namespaces,
    #    the kubelet's volumes and its own bind mount
    for _attempt in range(5):
        points = hostops.mounts_under(home, *containerd_roots)
        if not points:
            break
        found.append(f"{len(points)} mounts")
        for point in points:
            hostops.umount(point)
    left = hostops.mounts_under(home, *containerd_roots)
    if left:
        raise NodeError(f"could not unmount {left[:5]}: not removing {home} (it could delete through a mount)")
    # 4. cgroups
    for top in cgroup_tops:
        if top.is_dir():
            found.append(f"cgroup {top}")
            hostops.rmdir_tree(top)
    # 5. the bridge (a pod's veth goes with its network namespace)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"bridge {BRIDGE}")
        hostops.run(["ip", "link", "del", BRIDGE], check=False)
    # 6. iptables chains
    chains = hostops.sweep_iptables()
    if chains:
        found.append(f"{len(chains)} iptables chains")
    # 7. the host's settings and directories, as they were before the node
    if state_file.exists():
        state = json.loads(state_file.read_text())
        for name, value in (state.get("sysctls") or {}).items():
            if value is not None and hostops.read_sysctl(name) != value:
                hostops.write_sysctl(name, value)
                found.append(f"sysctl {name} restored to {value}")
        for directory in state.get("created_dirs") or []:
            path = Path(directory)
            if path == Path("/var/log/containers") and path.is_dir():
                for link in path.iterdir():
                    if link.is_symlink() and os.readlink(link).startswith(str(pod_logs_dir)):
                        link.unlink()
                if not any(path.iterdir()):
                    path.rmdir()
            elif path.exists():
                shutil.rmtree(path, ignore_errors=True)
        before = {tuple(t) for t in state.get("nft_tables") or []}
        for family, table in hostops.nft_tables():
            if (family, table) not in before and hostops.nft_table_is_empty(family, table):
                hostops.run(["nft", "delete", "table", family, table], check=False)
                found.append(f"empty nft table {family} {table}")
    # 8. the node's own folder
    if home.exists():
        found.append(f"folder {home}")
        shutil.rmtree(home, ignore_errors=True)
    return found
