"""Pod init: enters a private mount namespace, bind-mounts the pod's volumes, then execs the container.

Run by ``testbed.kubelet.worker`` as ``python -I -S podinit.py SPEC.json`` (stdlib
only, no package imports) so that the container's process keeps this PID.
The spec holds ``mounts`` (source, target, readOnly), ``argv``, ``env`` and ``cwd``.
Volumes thus appear at their real ``mountPath`` (``/var/run/secrets/...``,
``/opt/spark/conf``...) for this process and its children only.

With ``root`` (an image built here, see ``testbed.imagestore``) the container
runs inside the image: the image's root filesystem under a writable overlay of
the pod's own (read-only with ``readOnlyRoot``), with /proc, a minimal /dev, /sys,
the host's /etc/hosts and /etc/resolv.conf, the volumes mounted inside it, then
chroot and the user and groups of ``user`` (uid, gid, supplementary gids).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import warnings  # noqa: F401  (os.execvpe imports it lazily: after chroot the host stdlib is gone)

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
            ctypes.c_ulong(flags), data.encode() if data else None,
        ),
        f"mount {source} -> {target}",
    )


def _ensure_target(source: str, target: str) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
        with open(target, "a"):
            pass


MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
HOST_FILES = ("/etc/hosts", "/etc/resolv.conf")


def _resolve(root: str, path: str) -> str:
    """``path`` inside ``root`` with the image's symlinks followed inside it (/var/run -> /run)."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        host = os.path.join(root, *resolved, part)
        if os.path.islink(host) and hops < 40:
            hops += 1
            target = os.readlink(host)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        resolved.append(part)
    return os.path.join(root, *resolved)


def _run_in_image(spec: dict) -> None:
    """Mounts the image's root, /proc, /dev, /sys and the volumes, then chroot, user and exec."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", MS_REC | MS_PRIVATE)
    layer = spec["layer"]  # the pod's own writable layer
    root = os.path.join(layer, "merged")
    for d in ("upper", "work", "merged"):
        os.makedirs(os.path.join(layer, d), exist_ok=True)
    _mount("overlay", root, 0, "overlay",
           f"lowerdir={spec['root']},upperdir={layer}/upper,workdir={layer}/work")

    def inside(path: str) -> str:
        return _resolve(root, path)

    os.makedirs(inside("/proc"), exist_ok=True)
    _mount("proc", inside("/proc"), MS_NOSUID | MS_NODEV | MS_NOEXEC, "proc")
    os.makedirs(inside("/sys"), exist_ok=True)
    _mount("/sys", inside("/sys"), MS_BIND | MS_REC)
    _mount(None, inside("/sys"), MS_REMOUNT | MS_BIND | MS_RDONLY)
    dev = inside("/dev")
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, MS_NOSUID, "tmpfs", "mode=755,size=65536k")
    for name in DEVICES:
        _ensure_target(f"/dev/{name}", f"{dev}/{name}")
        _mount(f"/dev/{name}", f"{dev}/{name}", MS_BIND)
    os.makedirs(f"{dev}/shm")
    _mount("shm", f"{dev}/shm", MS_NOSUID | MS_NODEV, "tmpfs", "mode=1777,size=65536k")
    for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(to, f"{dev}/{link}")
    for path in HOST_FILES:
        if os.path.exists(path):
            _ensure_target(path, inside(path))
            _mount(path, inside(path), MS_BIND)
            _mount(None, inside(path), MS_REMOUNT | MS_BIND | MS_RDONLY)
    for m in spec.get("mounts") or []:
        target = inside(m["target"])
        _ensure_target(m["source"], target)
        _mount(m["source"], target, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(None, target, MS_REMOUNT | MS_BIND | MS_RDONLY)
    cwd = spec.get("cwd") or "/"
    os.makedirs(inside(cwd), exist_ok=True)
    if spec.get("readOnlyRoot"):
        _mount(None, root, MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.chroot(root)
    os.chdir(cwd)
    uid, gid, groups = spec.get("user") or [0, 0, []]
    os.setgroups(sorted({gid, *groups}))
    os.setgid(gid)
    os.setuid(uid)
    # a change of credentials clears the parent-death signal: set it again
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    # Die with the kubelet thread that started us, as a container dies with its runtime.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if spec.get("root"):
        _run_in_image(spec)
        _exec(spec)
        return
    mounts = spec.get("mounts") or []
    cwd = spec.get("cwd") or "/"
    os.makedirs(cwd, exist_ok=True)
    # Hold every source (and the working dir) open first: a volume mounted over
    # a parent of the kubelet's own dirs (an emptyDir at /tmp, say) would
    # otherwise hide the sources of the mounts after it.
    # (opened inside the new namespace: a bind mount's source must be in it)
    held: list[int] = []
    if mounts:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(None, "/", MS_REC | MS_PRIVATE)
    cwd_fd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY)
    held = [os.open(m["source"], os.O_PATH) for m in mounts]
    targets = [m["target"].rstrip("/") or "/" for m in mounts]
    # image paths under a mount target get bound back over the mounted volume
    keep = [(p, os.open(p, os.O_PATH)) for p in spec.get("keep") or []
            if os.path.isdir(p) and any(p.startswith(t + "/") for t in targets)]
    if mounts:
        for m, fd in zip(mounts, held):
            source = f"/proc/self/fd/{fd}"
            _ensure_target(source, m["target"])
            _mount(source, m["target"], MS_BIND | MS_REC)
            if m.get("readOnly"):
                _mount(None, m["target"], MS_REMOUNT | MS_BIND | MS_RDONLY)
    for path, fd in keep:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, MS_BIND | MS_REC)
        held.append(fd)
    for fd in held:
        os.close(fd)
    os.fchdir(cwd_fd)
    os.close(cwd_fd)
    _exec(spec)


def _exec(spec: dict) -> None:
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        sys.stderr.write(f"testbed podinit: exec {argv[0]!r} failed: {exc}\n")
        sys.exit(127)


if __name__ == "__main__":
    main()
