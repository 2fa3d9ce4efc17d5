"""The local image store that scripts/build-images.sh fills, as the test bed's kubelet reads it.

Called by ``testbed.kubelet.images`` (is this image built here? its config)
and by the image tests. An image is unpacked once per image id into a
root filesystem (a buildah working container named after the id, kept in the
store), which every container of that image shares read-only below its own
writable layer (``testbed.kubelet.podinit``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from testbed import locate

# the image names scripts/build-images.sh gives (version from pyproject.toml)
RUNTIME_REPOSITORY = "ghcr.io/streamjob/streamjob-runtime"
OPERATOR_REPOSITORY = "ghcr.io/streamjob/streamjob-operator"


class StoreError(RuntimeError):
    """buildah failed on the local store; the message carries its output."""


@dataclass(frozen=True)
class StoredImage:
    name: str
    image_id: str
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""
    working_dir: str = ""


def store_dir() -> Path:
    explicit = os.environ.get("STREAMJOB_IMAGES_DIR")
    return Path(explicit) if explicit else locate.cache_root() / "images"


def available() -> bool:
    return shutil.which("buildah") is not None and (store_dir() / "overlay").is_dir()


def _buildah(*args: str, timeout: float = 300) -> str:
    root = store_dir()
    argv = ["buildah", "--root", str(root / "overlay"), "--runroot", str(root / "runroot-overlay"),
            "--storage-driver", "overlay", *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "TMPDIR": str(root / "tmp")})
    if result.returncode != 0:
        raise StoreError(f"buildah {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout.strip()


def inspect(name: str) -> StoredImage | None:
    """The image of that name in the local store, or None when it was not built here."""
    if not available():
        return None
    try:
        out = _buildah("inspect", "--type", "image", name, timeout=60)
    except StoreError:
        return None
    data = json.loads(out)
    config = (data.get("OCIv1") or {}).get("config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    return StoredImage(
        name=name,
        image_id=data["FromImageID"],
        env=env,
        entrypoint=tuple(config.get("Entrypoint") or ()),
        cmd=tuple(config.get("Cmd") or ()),
        user=str(config.get("User") or ""),
        working_dir=str(config.get("WorkingDir") or ""),
    )


def rootfs(image: StoredImage) -> Path:
    """The image's root filesystem, unpacked on first use (a working container kept per image id)."""
    container = f"streamjob-rootfs-{image.image_id[:16]}"
    root = store_dir()
    with open(root / ".unpack.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            path = _buildah("mount", container, timeout=60)
        except StoreError:
            _buildah("from", "--pull-never", "--name", container, image.image_id, timeout=900)
            path = _buildah("mount", container, timeout=60)
    return Path(path)


def tag(name: str, new_name: str) -> None:
    """Another name for a built image (a new release tag, as a user pushes one)."""
    _buildah("tag", name, new_name, timeout=60)


def version() -> str:
    import tomllib

    with open(locate.repo_root() / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def runtime_image() -> str:
    return f"{RUNTIME_REPOSITORY}:{version()}"


def operator_image() -> str:
    return f"{OPERATOR_REPOSITORY}:{version()}"


def push_archive(name: str, archive: Path) -> None:
    """Writes a built image as an OCI archive (for containerd's import: testbed.nodeimages), named ``name`` inside."""
    # uncompressed: gzip is most of the export and of the import time, and the archive is deleted at once
    _buildah("push", "--quiet", "--disable-compression", name, f"oci-archive:{archive}:{name}", timeout=900)
