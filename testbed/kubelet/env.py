"""Container environment and ``$(VAR)`` expansion, as the real kubelet computes them.

Pure functions, called by ``testbed.kubelet.worker``. Lookups of ConfigMaps and
Secrets are passed in as callables so this module does no I/O itself.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]


class ConfigError(Exception):
    """The container cannot be configured yet (missing ConfigMap, Secret or key)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: ``$$`` escapes, unknown references stay as written."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == "$":
                out.append("$")
                advance = 1
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = text[cursor + 2 : close]
                    out.append(env[name] if name in env else f"$({name})")
                    advance = close - cursor
            else:
                out.append("$" + nxt)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Obj, path: str) -> str:
    """The value of a downward-API ``fieldRef`` on a pod that already has its IP set."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    simple: dict[str, Any] = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_PATH.match(path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".")[1], {})
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    raise ConfigError(f"unsupported fieldRef.fieldPath {path!r}")


_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "m": 10**-3,
}


def quantity(value: str) -> float:
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * _SUFFIXES[suffix]
    return float(value)


def resource_field_ref(container: Obj, ref: Obj, node_allocatable: Mapping[str, str]) -> str:
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    value = container.get("resources", {}).get(kind, {}).get(name) or (
        container.get("resources", {}).get("limits", {}).get(name) if kind == "requests" else None
    )
    if value is None:
        value = node_allocatable.get(name, "0")
    divisor = quantity(str(ref.get("divisor", "1")))
    return str(math.ceil(quantity(str(value)) / divisor))


def _lookup_key(
    kind: str, ref: Obj, get: Callable[[str], Obj | None]
) -> str | None:
    obj = get(ref["name"])
    optional = bool(ref.get("optional", False))
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{ref["name"]}" not found')
    key = ref["key"]
    if kind == "secret":
        data = obj.get("data") or {}
        if key in data:
            return base64.b64decode(data[key]).decode()
    else:
        data = obj.get("data") or {}
        if key in data:
            return str(data[key])
        binary = obj.get("binaryData") or {}
        if key in binary:
            return base64.b64decode(binary[key]).decode()
    if optional:
        return None
    raise ConfigError(f'couldn\'t find key {key} in {"Secret" if kind == "secret" else "ConfigMap"} {obj["metadata"]["namespace"]}/{ref["name"]}')


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def container_env(
    pod: Obj,
    container: Obj,
    *,
    service_env: Mapping[str, str],
    get_config_map: Callable[[str], Obj | None],
    get_secret: Callable[[str], Obj | None],
    node_allocatable: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment: service links, then ``envFrom``, then ``env`` in order."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        if "configMapRef" in source:
            ref = source["configMapRef"]
            obj = get_config_map(ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'configmap "{ref["name"]}" not found')
            values = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        elif "secretRef" in source:
            ref = source["secretRef"]
            obj = get_secret(ref["name"])
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref["name"]}" not found')
            values = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        else:
            continue
        for key, value in values.items():
            name = prefix + key
            if _ENV_NAME.match(name):
                env[name] = value
    for entry in container.get("env") or []:
        name = entry["name"]
        mapping = {**service_env, **env}
        if entry.get("value") not in (None, ""):
            env[name] = expand(str(entry["value"]), mapping)
            continue
        source = entry.get("valueFrom")
        if not source:
            env[name] = ""
            continue
        if "fieldRef" in source:
            env[name] = field_ref(pod, source["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in source:
            env[name] = resource_field_ref(container, source["resourceFieldRef"], node_allocatable)
        elif "configMapKeyRef" in source:
            found = _lookup_key("configmap", source["configMapKeyRef"], get_config_map)
            if found is not None:
                env[name] = found
        elif "secretKeyRef" in source:
            found = _lookup_key("secret", source["secretKeyRef"], get_secret)
            if found is not None:
                env[name] = found
    for key, value in service_env.items():
        env.setdefault(key, value)
    return env


def kubernetes_service_env(host: str, port: int) -> dict[str, str]:
    """The ``kubernetes`` Service link variables every container gets."""
    return {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": str(port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
        "KUBERNETES_PORT": f"tcp://{host}:{port}",
        "KUBERNETES_PORT_443_TCP": f"tcp://{host}:{port}",
        "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
        "KUBERNETES_PORT_443_TCP_ADDR": host,
        "KUBERNETES_PORT_443_TCP_PORT": str(port),
    }
