"""The local image store that scripts/build-images.sh fills (buildah's), and the names the tests run its images by.

Called by ``testbed.nodeimages`` (the archives the real node imports), ``testbed.cluster`` (tags of the built
runtime image in the node's store) and the tests (is an image built here? its config).
"""

from __future__ import annotations

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
# A name no image is built under, which the tests' jobs run; the test bed makes it, and the release tags upgrade tests
# move it to, tags of the built runtime image in the node's store (tests/conftest.py), as a registry would.
DEV_IMAGE = "localhost/streamjob-dev/streamjob-runtime:0.1.0"
DEV_TAGS = tuple(DEV_IMAGE.replace("0.1.0", tag) for tag in ("0.1.0", "0.2.0", *(f"0.1.{n}" for n in range(1, 10))))


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
