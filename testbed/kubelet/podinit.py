"""Pod init: enters a private mount namespace, bind-mounts the pod's volumes, then execs the container.

Run by ``testbed.kubelet.worker`` as ``python -I -S podinit.py SPEC.json`` (stdlib
only, no package imports) so that the container's process keeps this PID.
The spec holds ``mounts`` (source, target, readOnly), ``argv``, ``env`` and ``cwd``.
Volumes thus appear at their real ``mountPath`` (``/var/run/secrets/...``,
``/opt/spark/conf``...) for this process and its children only.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

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


def _mount(source: str | None, target: str, flags: int) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None, target.encode(), None, ctypes.c_ulong(flags), None
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


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    # Die with the kubelet thread that started us, as a container dies with its runtime.
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
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
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as exc:
        sys.stderr.write(f"testbed podinit: exec {argv[0]!r} failed: {exc}\n")
        sys.exit(127)


if __name__ == "__main__":
    main()
