"""What a container of an image built here needs beyond a process: its root, user and home.

Called by ``testbed.kubelet.worker`` for images that ``images.resolve`` found in
the local store; the result goes into the spec that ``podinit`` reads.
Pure functions over the pod, the container and the image.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed.kubelet.env import ConfigError
from testbed.kubelet.images import Image

Obj = dict[str, Any]
PODINIT = str(Path(__file__).with_name("podinit.py"))


def _passwd(root: Path) -> list[list[str]]:
    try:
        lines = (root / "etc" / "passwd").read_text().splitlines()
    except OSError:
        return []
    return [line.split(":") for line in lines if line.count(":") >= 6]


def image_user(image: Image) -> tuple[int, int | None]:
    """The image's USER (``185:185``, ``185``, ``spark``) as uid and gid (None: the user's own)."""
    user, _, group = image.user.partition(":")
    uid = 0
    gid: int | None = int(group) if group.isdigit() else None
    if user.isdigit():
        uid = int(user)
    elif user and image.root is not None:
        entry = next((e for e in _passwd(image.root) if e[0] == user), None)
        if entry is None:
            raise ConfigError(f'image {image.name}: USER "{user}" is not in its /etc/passwd')
        uid = int(entry[2])
        gid = int(entry[3]) if gid is None else gid
    return uid, gid


def primary_gid(image: Image, uid: int) -> int:
    if image.root is None:
        return 0
    entry = next((e for e in _passwd(image.root) if e[2] == str(uid)), None)
    return int(entry[3]) if entry else 0


def home(image: Image, uid: int) -> str:
    """HOME as a container runtime sets it: the user's passwd entry, else /."""
    if image.root is not None:
        entry = next((e for e in _passwd(image.root) if e[2] == str(uid)), None)
        if entry and entry[5]:
            return entry[5]
    return "/"


def run_spec(pod: Obj, container: Obj, image: Image, layer: Path) -> Obj:
    """The podinit spec fields for running ``container`` inside ``image``: root, user, groups."""
    assert image.root is not None
    pod_sc = pod["spec"].get("securityContext") or {}
    sc = container.get("securityContext") or {}
    image_uid, image_gid = image_user(image)
    uid = sc.get("runAsUser", pod_sc.get("runAsUser", image_uid))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if gid is None:
        gid = image_gid if image_gid is not None and uid == image_uid else primary_gid(image, int(uid))
    groups = [int(g) for g in pod_sc.get("supplementalGroups") or []]
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    return {
        "root": str(image.root),
        "layer": str(layer),
        "user": [int(uid), int(gid), groups],
        "readOnlyRoot": bool(sc.get("readOnlyRootFilesystem", False)),
    }


def run(name: str, command: list[str], work: Path, *, env: dict[str, str] | None = None,
        mounts: tuple[tuple[str, str, bool], ...] = (), timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``docker run --rm --read-only NAME COMMAND`` for an image built here: its root, user and env.

    For the image tests; ``work`` holds the container's writable layer and spec.
    ``mounts`` are (host path, path in the container, read-only).
    """
    from testbed import imagestore
    from testbed.kubelet import images

    stored = imagestore.inspect(name)
    if stored is None:
        raise images.ImageNotFound(f"image {name} is not in the local store (bash scripts/build-images.sh)")
    image = images.built(stored)
    spec = run_spec({"spec": {}}, {"securityContext": {"readOnlyRootFilesystem": True}}, image, work / "layer")
    spec.update(
        argv=image.argv(command, [], image.env),
        env={**image.env, "HOME": home(image, spec["user"][0]), **(env or {})},
        cwd=image.working_dir or "/",
        mounts=[{"source": s, "target": t, "readOnly": ro} for s, t, ro in mounts],
    )
    work.mkdir(parents=True, exist_ok=True)
    spec_path = work / "container.json"
    spec_path.write_text(json.dumps(spec))
    return subprocess.run([sys.executable, "-I", "-S", PODINIT, str(spec_path)], capture_output=True, text=True,
                          timeout=timeout, env={}, cwd="/")
