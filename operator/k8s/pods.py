"""Merges a StreamJob's pod templates with the pods the operator must own, and the restricted defaults.

Pure: manifests in, manifests out. Called by k8s.resources for the driver pod
and for the executor pod template file Spark reads (executor pods are created
by the driver, so the template reaches them as `spark.kubernetes.executor.
podTemplateFile`). The rules are stated in api.podtemplate.MERGE_RULES (rendered
into docs/reference.md, 'Pod templates').
"""

from __future__ import annotations

import copy
from typing import Any

from streamjob_operator.api.podtemplate import MAIN_CONTAINER, PodTemplate, dump

Manifest = dict[str, Any]

RUNTIME_UID = 185  # the image's user (Dockerfile `USER 185`, the spark user of the Apache Spark image)
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
EXECUTOR_CONTAINER = "executor"

# What the `restricted` Pod Security Standard asks of every pod and container.
POD_SECURITY_DEFAULTS: Manifest = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "fsGroup": RUNTIME_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_DEFAULTS: Manifest = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def merge(base: Any, over: Any) -> Any:
    """`over` merged onto `base`: maps key by key, named-object lists by name, other values replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = copy.deepcopy(base)
        for key, value in over.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(over, list) and _named(base) and _named(over):
        out_list = [copy.deepcopy(i) for i in base]
        index = {i["name"]: n for n, i in enumerate(out_list)}
        for item in over:
            if item["name"] in index:
                out_list[index[item["name"]]] = merge(out_list[index[item["name"]]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(over)


def role_template(common: PodTemplate | None, role: PodTemplate | None) -> Manifest:
    """The template of one role: the role's podTemplate merged over spec.podTemplate."""
    merged: Manifest = merge(dump(common), dump(role))
    return merged


def _secured(spec: Manifest) -> Manifest:
    """The restricted defaults under the pod's and every container's own securityContext."""
    spec["securityContext"] = merge(POD_SECURITY_DEFAULTS, spec.get("securityContext") or {})
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            container["securityContext"] = merge(CONTAINER_SECURITY_DEFAULTS, container.get("securityContext") or {})
    return spec


def _pull_secrets(*lists: list[Manifest] | None) -> list[Manifest]:
    seen: dict[str, Manifest] = {}
    for items in lists:
        for item in items or []:
            seen.setdefault(item["name"], {"name": item["name"]})
    return list(seen.values())


def _by_name(ours: list[Manifest], theirs: list[Manifest] | None, key: str = "name") -> list[Manifest]:
    """Ours, then theirs whose `key` none of ours has."""
    taken = {o.get(key) for o in ours}
    return [*copy.deepcopy(ours), *(copy.deepcopy(t) for t in theirs or [] if t.get(key) not in taken)]


def main_container(user: Manifest, ours: Manifest) -> Manifest:
    """The template's `main` container merged into the operator's: the operator's wiring wins."""
    out = {k: copy.deepcopy(v) for k, v in user.items() if k != "name"}
    out.update(copy.deepcopy(ours))
    out["env"] = _by_name(ours.get("env", []), user.get("env"))
    our_ports = ours.get("ports", [])
    out["ports"] = _by_name(our_ports, [p for p in user.get("ports") or []
                                        if p.get("containerPort") not in {o.get("containerPort") for o in our_ports}])
    out["volumeMounts"] = [*copy.deepcopy(ours.get("volumeMounts", [])), *copy.deepcopy(user.get("volumeMounts") or [])]
    out["resources"] = merge(user.get("resources") or {}, ours.get("resources", {}))
    if "securityContext" in user:
        out["securityContext"] = copy.deepcopy(user["securityContext"])
    for key in ("env", "ports", "volumeMounts", "resources"):
        if not out[key]:
            del out[key]
    return out


def _split(spec: Manifest) -> tuple[Manifest, list[Manifest]]:
    containers = spec.pop("containers", None) or []
    main: Manifest = next((c for c in containers if c.get("name") == MAIN_CONTAINER), {})
    return main, [c for c in containers if c.get("name") != MAIN_CONTAINER]


def _metadata(template: Manifest, labels: dict[str, str], annotations: dict[str, str]) -> Manifest:
    meta = template.get("metadata") or {}
    out: Manifest = {}
    if labels or meta.get("labels"):
        out["labels"] = {**(meta.get("labels") or {}), **labels}
    if annotations or meta.get("annotations"):
        out["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    return out


def driver_pod(template: Manifest, own: Manifest, pull_secrets: list[Manifest] | None) -> Manifest:
    """The operator's driver pod (one container) with the driver's template merged in."""
    spec = copy.deepcopy(template.get("spec") or {})
    main, sidecars = _split(spec)
    ours = own["spec"]["containers"][0]
    merged = {**spec, **{k: copy.deepcopy(v) for k, v in own["spec"].items() if k not in ("containers", "volumes")}}
    merged["containers"] = [main_container(main, ours), *sidecars]  # first: `kubectl logs` and the test bed's kubelet
    merged["volumes"] = [*copy.deepcopy(own["spec"].get("volumes", [])), *(spec.get("volumes") or [])]
    secrets = _pull_secrets(pull_secrets, spec.get("imagePullSecrets"))
    if secrets:
        merged["imagePullSecrets"] = secrets
    meta = own["metadata"]
    annotations = {**(meta.get("annotations") or {}), DEFAULT_CONTAINER_ANNOTATION: ours["name"]}
    metadata = {**copy.deepcopy(meta), **_metadata(template, meta.get("labels") or {}, annotations)}
    return {**own, "metadata": metadata, "spec": _secured(merged)}


def executor_template(template: Manifest, pull_secrets: list[Manifest] | None,
                      volumes: list[Manifest] | None = None, mounts: list[Manifest] | None = None) -> Manifest:
    """The pod template file Spark builds executor pods from (spark.kubernetes.executor.podTemplateFile).

    Spark sets the executor container's image, command, env, ports and
    resources itself and keeps the rest; it appends that container after the
    sidecars, so the default-container annotation names it. `volumes` and
    their `mounts` in the executor container are the operator's, ahead of the template's.
    """
    spec = copy.deepcopy(template.get("spec") or {})
    main, sidecars = _split(spec)
    # the driver's merge rule (main_container): the template's container with the operator's mounts ahead of its own
    executor = {"name": EXECUTOR_CONTAINER, **main_container(main, {"volumeMounts": mounts or []})}
    if volumes:
        spec["volumes"] = [*copy.deepcopy(volumes), *(spec.get("volumes") or [])]
    spec["containers"] = [executor, *sidecars]
    secrets = _pull_secrets(pull_secrets, spec.get("imagePullSecrets"))
    if secrets:
        spec["imagePullSecrets"] = secrets
    metadata = _metadata(template, {}, {DEFAULT_CONTAINER_ANNOTATION: EXECUTOR_CONTAINER})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": _secured(spec)}
