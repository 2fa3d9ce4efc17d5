"""The real node's images: imported into containerd's k8s.io namespace once per image id, never pulled.

Called by ``testbed.node.RealNode`` (``import_images`` at ``start()``, once containerd
serves; ``busybox_image`` for the node tests' pods). ``ctr`` is ``RealNode.ctr``: the
ctr client on the node's containerd socket and namespace.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Protocol

from testbed import imagestore, locate
from testbed.hostops import NodeError

log = logging.getLogger(__name__)


class Ctr(Protocol):
    def __call__(self, *args: str, timeout: float = ..., check: bool = ...) -> subprocess.CompletedProcess[str]: ...


def pause_image() -> str:
    return f"registry.k8s.io/pause:{locate.node_pin('PAUSE_VERSION')}"


def busybox_image(bins: Path) -> str:
    return (bins / "images" / "busybox.name").read_text().strip()


def image_names(ctr: Ctr) -> set[str]:
    return {line.split()[0] for line in ctr("images", "ls").stdout.splitlines()[1:] if line.strip()}


def import_images(ctr: Ctr, bins: Path, containerd_root: Path) -> list[str]:
    """pause and busybox (build-node.sh's archives), and the images scripts/build-images.sh built
    (the runtime and operator), each imported once per image id into containerd's k8s.io namespace."""
    # one folder of stamps per image store (a second node's containerd has its own, testbed.secondnode)
    stamps = containerd_root.parent / ("imported" if containerd_root.name == "containerd" else f"imported-{containerd_root.name}")
    stamps.mkdir(parents=True, exist_ok=True)
    present = image_names(ctr)
    log.info("Images in containerd images=%s", sorted(present))
    imported = []

    def needed(name: str, identity: str) -> bool:
        stamp = stamps / name.replace("/", "_").replace(":", "_")
        return not (name in present and stamp.exists() and stamp.read_text() == identity)

    def done(name: str, identity: str) -> None:
        (stamps / name.replace("/", "_").replace(":", "_")).write_text(identity)
        imported.append(name)

    for archive, name in ((bins / "images" / "pause.oci.tar", pause_image()),
                          (bins / "images" / "busybox.oci.tar", busybox_image(bins))):
        identity = f"{archive.stat().st_size}-{archive.stat().st_mtime_ns}"
        if needed(name, identity):
            _import_archive(ctr, archive, name)
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
                _import_archive(ctr, tmp, name)
            finally:
                tmp.unlink(missing_ok=True)
            done(name, stored.image_id)
    return imported


def _import_archive(ctr: Ctr, archive: Path, name: str) -> None:
    started = time.monotonic()
    ctr("images", "import", "--platform", "linux/amd64", "--snapshotter", "overlayfs", str(archive), timeout=900)
    names = image_names(ctr)
    if name not in names:
        raise NodeError(f"ctr images import {archive} did not create {name} (images now: {sorted(names)})")
    log.info("Imported image=%s seconds=%.1f", name, time.monotonic() - started)
