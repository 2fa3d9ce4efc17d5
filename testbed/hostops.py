"""Reading and removing what a real node leaves on this machine: mounts, cgroups, iptables chains, nft tables, processes.

Called by ``testbed.nodehost`` (the node's setup and its sweep), ``testbed.node``
(``run`` for ctr, ``NodeError``) and, through ``testbed.node``, by the node tests
(``mounts_under``, ``cgroup_mount_points``, ``iptables_chains``: what a stopped node
must not have left). Each function reads or removes one kind of host state; which of
it belongs to the node, and in what order it goes, is ``testbed.nodehost``'s.
"""

from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path

CHAIN_PREFIXES = ("KUBE-", "CNI-", "STREAMJOB-")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")

MNT_DETACH = 2


class NodeError(RuntimeError):
    """The real node could not be set up or torn down; the message says what and why."""


def run(argv: list[str], *, check: bool = True, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()[-2000:]}")
    return result


def write_sysctl(name: str, value: str) -> None:
    Path("/proc/sys", *name.split(".")).write_text(value)


def read_sysctl(name: str) -> str | None:
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
    result = run([binary, "-w", "5", "-t", table, "-S"], check=False)
    chains = []
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-N" and parts[1].startswith(CHAIN_PREFIXES):
            chains.append(parts[1])
    return chains


def sweep_iptables() -> list[str]:
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
            listing = run([binary, "-w", "5", "-t", table, "-S"], check=False).stdout.splitlines()
            for line in listing:
                parts = shlex.split(line)  # comments are quoted
                if parts[:1] == ["-A"] and parts[1] not in chains and "-j" in parts:
                    target = parts[parts.index("-j") + 1]
                    if target.startswith(CHAIN_PREFIXES):
                        run([binary, "-w", "5", "-t", table, "-D", *parts[1:]], check=False)
            for chain in chains:
                run([binary, "-w", "5", "-t", table, "-F", chain], check=False)
            for chain in chains:
                run([binary, "-w", "5", "-t", table, "-X", chain], check=False)
            removed += [f"{binary}/{table}/{c}" for c in chains]
    return removed


def nft_tables() -> list[tuple[str, str]]:
    """(family, name) of every nftables table; empty without the nft tool."""
    if not shutil.which("nft"):
        return []
    out = run(["nft", "list", "tables"], check=False).stdout
    return [(p[1], p[2]) for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[0] == "table"]


def nft_table_is_empty(family: str, table: str) -> bool:
    """No rule in any chain of the table (its base chains may remain)."""
    out = run(["nft", "-j", "list", "table", family, table], check=False).stdout
    try:
        items = json.loads(out)["nftables"]
    except (ValueError, KeyError):
        return False
    return not any("rule" in item or "set" in item or "map" in item for item in items)


def argv_mentions(pid: int, roots: Iterable[str]) -> bool:
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


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def cgroup_pids(cgroup_dirs: Iterable[Path]) -> set[int]:
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


def kill(pids: Iterable[int]) -> None:
    for pid in pids:
        if pid in (os.getpid(), 1):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def umount(path: str) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.umount2(path.encode(), MNT_DETACH) == 0


def rmdir_tree(top: Path) -> None:
    """rmdir a cgroup directory tree, leaves first (cgroup dirs hold only virtual files)."""
    if not top.is_dir():
        return
    for dirpath, _dirs, _files in os.walk(top, topdown=False):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass

