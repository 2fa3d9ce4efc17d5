"""The pure parts of running a container inside an image: paths inside its root, its user."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from testbed.kubelet import imagerun
from testbed.kubelet.env import ConfigError
from testbed.kubelet.images import Image

_spec = importlib.util.spec_from_file_location("podinit", imagerun.PODINIT)
assert _spec is not None and _spec.loader is not None
podinit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(podinit)


def test_paths_follow_the_images_symlinks_inside_its_root_never_the_hosts(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # Debian's: absolute, so relative to the root
    (root / "opt" / "venv" / "pyspark").mkdir(parents=True)
    (root / "opt" / "spark").symlink_to("/opt/venv/pyspark")
    (root / "opt" / "rel").symlink_to("venv")
    base = str(root)
    assert podinit._resolve(base, "/var/run/secrets/kubernetes.io/serviceaccount") == f"{base}/run/secrets/kubernetes.io/serviceaccount"
    assert podinit._resolve(base, "/opt/spark/conf") == f"{base}/opt/venv/pyspark/conf"
    assert podinit._resolve(base, "/opt/rel/pyspark") == f"{base}/opt/venv/pyspark"
    assert podinit._resolve(base, "/../../etc/passwd") == f"{base}/etc/passwd"


def _image(tmp_path: Path, user: str) -> Image:
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\nspark:x:185:185::/opt/spark/work-dir:/bin/sh\n")
    return Image("img", root=tmp_path, user=user)


@pytest.mark.parametrize(
    ("user", "pod_sc", "sc", "expected"),
    [
        ("185:185", {}, {}, [185, 185, []]),
        ("spark", {}, {}, [185, 185, []]),
        ("", {}, {}, [0, 0, []]),
        ("185:185", {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]}, {}, [1000, 0, [3000, 2000]]),
        ("185:185", {"runAsUser": 1000, "runAsGroup": 1001}, {"runAsUser": 185}, [185, 1001, []]),
    ],
)
def test_the_user_is_the_security_contexts_else_the_images(tmp_path: Path, user: str, pod_sc: dict, sc: dict, expected: list) -> None:
    pod = {"spec": {"securityContext": pod_sc}}
    spec = imagerun.run_spec(pod, {"securityContext": {**sc, "readOnlyRootFilesystem": True}}, _image(tmp_path, user), tmp_path / "layer")
    assert spec["user"] == expected
    assert spec["readOnlyRoot"] is True and spec["root"] == str(tmp_path)
    assert imagerun.home(_image(tmp_path, user), expected[0]) == {0: "/root", 185: "/opt/spark/work-dir"}.get(expected[0], "/")


def test_an_image_user_missing_from_its_passwd_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='USER "nobody2"'):
        imagerun.run_spec({"spec": {}}, {}, _image(tmp_path, "nobody2"), tmp_path / "layer")
