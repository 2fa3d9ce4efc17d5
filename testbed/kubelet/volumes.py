"""Materialises a pod's volumes into its directory and lists the bind mounts of its container.

Called by ``testbed.kubelet.worker`` before a container starts. Supported:
emptyDir, hostPath, configMap, secret, downwardAPI and projected (with
serviceAccountToken through the TokenRequest API, as the kubelet does for the
default ``kube-api-access-*`` volume). Anything else is a configuration error.
"""

from __future__ import annotations

import base64
import shutil
from dataclasses import dataclass
from pathlib import Path

from testbed.kubelet.api import KubeletApi, Obj
from testbed.kubelet.env import ConfigError, field_ref, resource_field_ref


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool

    def to_json(self) -> Obj:
        return {"source": self.source, "target": self.target, "readOnly": self.read_only}


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def _key_values(obj: Obj, *, secret: bool) -> dict[str, bytes]:
    values: dict[str, bytes] = {}
    if secret:
        for key, value in (obj.get("data") or {}).items():
            values[key] = base64.b64decode(value)
        for key, value in (obj.get("stringData") or {}).items():
            values[key] = str(value).encode()
    else:
        for key, value in (obj.get("data") or {}).items():
            values[key] = str(value).encode()
        for key, value in (obj.get("binaryData") or {}).items():
            values[key] = base64.b64decode(value)
    return values


def _project_keys(
    target: Path, values: dict[str, bytes], items: list[Obj] | None, default_mode: int, what: str
) -> None:
    if items:
        for item in items:
            if item["key"] not in values:
                raise ConfigError(f"{what}: key {item['key']!r} not found")
            _write(target / item["path"], values[item["key"]], int(item.get("mode", default_mode)))
    else:
        for key, value in values.items():
            _write(target / key, value, default_mode)


class VolumeBuilder:
    def __init__(self, api: KubeletApi, node_allocatable: dict[str, str]) -> None:
        self.api = api
        self.node_allocatable = node_allocatable

    def _config_map(self, pod: Obj, source: Obj, target: Path, default_mode: int) -> None:
        namespace = pod["metadata"]["namespace"]
        obj = self.api.get_config_map(namespace, source["name"])
        if obj is None:
            if source.get("optional"):
                return
            raise ConfigError(f'configmap "{source["name"]}" not found')
        _project_keys(target, _key_values(obj, secret=False), source.get("items"), default_mode, f'configmap "{source["name"]}"')

    def _secret(self, pod: Obj, name: str, source: Obj, target: Path, default_mode: int) -> None:
        namespace = pod["metadata"]["namespace"]
        obj = self.api.get_secret(namespace, name)
        if obj is None:
            if source.get("optional"):
                return
            raise ConfigError(f'secret "{name}" not found')
        _project_keys(target, _key_values(obj, secret=True), source.get("items"), default_mode, f'secret "{name}"')

    def _downward(self, pod: Obj, items: list[Obj], target: Path, default_mode: int) -> None:
        containers = pod["spec"].get("containers") or [{}]
        for item in items:
            if "fieldRef" in item:
                value = field_ref(pod, item["fieldRef"]["fieldPath"])
            else:
                ref = item["resourceFieldRef"]
                container = next(
                    (c for c in containers if c.get("name") == ref.get("containerName")), containers[0]
                )
                value = resource_field_ref(container, ref, self.node_allocatable)
            _write(target / item["path"], value.encode(), int(item.get("mode", default_mode)))

    def _projected(self, pod: Obj, volume: Obj, target: Path) -> None:
        spec = volume["projected"]
        default_mode = int(spec.get("defaultMode", 0o644))
        for source in spec.get("sources") or []:
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = self.api.request_token(
                    pod["metadata"]["namespace"],
                    pod["spec"].get("serviceAccountName") or "default",
                    pod=pod,
                    audience=sat.get("audience"),
                    expiration=int(sat.get("expirationSeconds", 3600)),
                )
                _write(target / sat["path"], token.encode(), default_mode)
            elif "configMap" in source:
                self._config_map(pod, source["configMap"], target, default_mode)
            elif "secret" in source:
                self._secret(pod, source["secret"]["name"], source["secret"], target, default_mode)
            elif "downwardAPI" in source:
                self._downward(pod, source["downwardAPI"].get("items") or [], target, default_mode)
            else:
                raise ConfigError(f"volume {volume['name']!r}: unsupported projected source {sorted(source)}")

    def materialise(self, pod: Obj, pod_dir: Path) -> dict[str, Path]:
        """Writes every volume under ``pod_dir/volumes`` and returns name → host path."""
        root = pod_dir / "volumes"
        if root.exists():
            shutil.rmtree(root)
        paths: dict[str, Path] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                host = Path(volume["hostPath"]["path"])
                if volume["hostPath"].get("type") in ("DirectoryOrCreate", None, "") and not host.exists():
                    host.mkdir(parents=True, exist_ok=True)
                paths[name] = host
                continue
            target = root / name
            target.mkdir(parents=True)
            if "emptyDir" in volume:
                target.chmod(0o777)  # as the kubelet makes it: writable by the container's user
            elif "configMap" in volume:
                src = volume["configMap"]
                self._config_map(pod, src, target, int(src.get("defaultMode", 0o644)))
            elif "secret" in volume:
                src = volume["secret"]
                self._secret(pod, src["secretName"], src, target, int(src.get("defaultMode", 0o644)))
            elif "downwardAPI" in volume:
                src = volume["downwardAPI"]
                self._downward(pod, src.get("items") or [], target, int(src.get("defaultMode", 0o644)))
            elif "projected" in volume:
                self._projected(pod, volume, target)
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise ConfigError(f"volume {name!r}: unsupported volume type {kinds} in the test bed")
            paths[name] = target
        return paths


def container_mounts(container: Obj, volume_paths: dict[str, Path], pod_name: str) -> list[Mount]:
    mounts: list[Mount] = []
    for vm in container.get("volumeMounts") or []:
        name = vm["name"]
        if name not in volume_paths:
            raise ConfigError(f'volumeMount "{name}" of pod "{pod_name}" names no volume of the pod')
        source = volume_paths[name]
        sub = vm.get("subPath") or ""
        if sub:
            source = source / sub
            if not source.exists():
                source.mkdir(parents=True)
        mounts.append(Mount(str(source), vm["mountPath"], bool(vm.get("readOnly", False))))
    return mounts
