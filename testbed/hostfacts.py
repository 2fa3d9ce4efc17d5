"""What this machine is, as the real node needs to know it: detected, never assumed.

Called by ``testbed.node`` (once per node; ``testbed.nodeconfig`` turns the facts into kubelet
and containerd settings, ``testbed.nodehost`` into the node's cgroups) and by the node tests.
One place for the facts that change the node's configuration from one machine to
another: the cgroup version (v1 here: the kubelet then needs ``failCgroupV1: false``),
whether this process holds ``CAP_SYS_RESOURCE`` (not here: containerd then needs
``restrict_oom_score_adj = true``, or runc cannot lower a sandbox's ``oom_score_adj``),
swap, the bridge netfilter hook kube-proxy relies on, and the iptables backend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CAP_SYS_RESOURCE = 24  # linux/capability.h


@dataclass(frozen=True)
class HostFacts:
    cgroup_version: int  # 1 or 2
    # cgroup v1: controller name -> its hierarchy's mount point (cpu, memory, pids, ...)
    cgroup_v1_hierarchies: dict[str, str]
    cap_sys_resource: bool
    swap_on: bool
    bridge_nf_call_iptables: bool | None  # None: br_netfilter not loaded
    ip_forward: bool
    iptables_backend: str  # "nf_tables", "legacy" or "" when iptables is missing
    kmsg: bool  # /dev/kmsg readable (the kubelet's OOM watcher)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"cgroup v{self.cgroup_version}, CAP_SYS_RESOURCE {'present' if self.cap_sys_resource else 'missing'}, "
            f"swap {'on' if self.swap_on else 'off'}, iptables {self.iptables_backend or 'missing'}, "
            f"bridge-nf-call-iptables {self.bridge_nf_call_iptables}, ip_forward {int(self.ip_forward)}"
        )


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def cgroup_v1_hierarchies(mountinfo: str | None = None) -> dict[str, str]:
    """Controller -> mount point of each cgroup v1 hierarchy (from /proc/self/mountinfo)."""
    text = mountinfo if mountinfo is not None else _read("/proc/self/mountinfo")
    found: dict[str, str] = {}
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or rfields[0] != "cgroup":
            continue
        mount_point = fields[4]
        for option in rfields[2].split(","):
            if option.startswith("name="):
                found[option] = mount_point
            elif option not in ("rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "nsdelegate") and "=" not in option:
                found[option] = mount_point
    return found


def cgroup_version(root: Path = CGROUP_ROOT) -> int:
    """2 when /sys/fs/cgroup is the unified hierarchy, 1 otherwise (hybrid counts as 1: the kubelet's view)."""
    return 2 if (root / "cgroup.controllers").exists() else 1


def has_capability(cap: int, status: str | None = None) -> bool:
    text = status if status is not None else _read("/proc/self/status")
    for line in text.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def iptables_backend() -> str:
    iptables = shutil.which("iptables")
    if not iptables:
        return ""
    try:
        out = subprocess.run([iptables, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return "nf_tables" if "nf_tables" in out else "legacy"


def detect() -> HostFacts:
    version = cgroup_version()
    swaps = _read("/proc/swaps").splitlines()
    nf = _read("/proc/sys/net/bridge/bridge-nf-call-iptables")
    return HostFacts(
        cgroup_version=version,
        cgroup_v1_hierarchies=cgroup_v1_hierarchies() if version == 1 else {},
        cap_sys_resource=has_capability(CAP_SYS_RESOURCE),
        swap_on=len(swaps) > 1,
        bridge_nf_call_iptables=(nf == "1") if nf else None,
        ip_forward=_read("/proc/sys/net/ipv4/ip_forward") == "1",
        iptables_backend=iptables_backend(),
        kmsg=os.access("/dev/kmsg", os.R_OK),
    )
