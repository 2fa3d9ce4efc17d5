"""Generates the StreamJob CustomResourceDefinition from the typed models.

Run as `python -m streamjob_operator.api.crd` (or `make crds`) to rewrite
`crds/` and the Helm chart's copy; tests/unit/test_crd_drift.py fails when
the committed YAML differs from what this produces. Pure apart from `main`.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from .spec import API_GROUP, API_VERSION, KIND, PLURAL, SHORT_NAMES, SINGULAR, StreamJobSpec
from .status import StreamJobStatus

CRD_FILENAME = f"{API_GROUP}_{PLURAL}.yaml"
REPO_ROOT = Path(__file__).resolve().parents[2]
CRD_TARGETS = [REPO_ROOT / "crds" / CRD_FILENAME, REPO_ROOT / "charts" / "streamjob" / "crds" / CRD_FILENAME]
REFERENCE_TARGET = REPO_ROOT / "docs" / "reference.md"

_DROP_KEYS = {"title"}

# The job's name becomes the value of the streamjob.io/job label on every object
# the operator and Spark create for it (at most 63 characters), and the stem of
# the driver Service `<name>-driver`, a DNS-1035 label (a lowercase letter first,
# no dots; reconcile.names shortens the length, not the characters; Kubernetes
# 1.36 relaxes Service names to DNS-1123 labels, digit first, by default
# (KEP-5311), older clusters do not). The API server only asks a DNS-1123
# subdomain of a StreamJob's name (253 characters, digits first and dots
# allowed), so anything in between would be accepted and then fail on every
# reconcile pass.
MAX_NAME_LENGTH = 63
NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


def name_rules() -> list[dict[str, Any]]:
    """CEL rules on metadata.name at the schema root, checked when a StreamJob is created.

    The messages name the field themselves: a root rule cannot point a fieldPath at metadata.

    `optionalOldSelf` with `oldSelf.hasValue() ||` skips updates: the name cannot
    change, and an object created before these rules must still take status
    updates and lose its finalizer, or it could never be deleted.
    """
    return [
        {
            "rule": f"oldSelf.hasValue() || size(self.metadata.name) <= {MAX_NAME_LENGTH}",
            "optionalOldSelf": True,
            "message": f"metadata.name must be no more than {MAX_NAME_LENGTH} characters: the name is the value of the "
            "streamjob.io/job label on every object the operator creates for the job",
            # no fieldPath: the API server accepts only paths inside the schema, and metadata is not one
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"oldSelf.hasValue() || self.metadata.name.matches('{NAME_PATTERN}')",
            "optionalOldSelf": True,
            "message": "metadata.name must start with a lowercase letter and contain only lowercase letters, digits and '-' "
            "(no '.'): the driver Service '<name>-driver' must be a DNS-1035 label (no Kubernetes allows '.' "
            "in a Service name; before 1.36 none allows a digit first)",
            # no fieldPath: the API server accepts only paths inside the schema, and metadata is not one
            "reason": "FieldValueInvalid",
        },
    ]


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a Kubernetes structural schema node."""
    node = dict(schema)
    ref = node.pop("$ref", None)
    if ref is not None:
        target = copy.deepcopy(defs[ref.rsplit("/", 1)[-1]])
        target.update(node)  # field-level description/default win over the definition's
        return _structural(target, defs)
    any_of = node.pop("anyOf", None)
    if any_of is not None:
        options = [o for o in any_of if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {any_of} in a structural schema")
        merged = dict(options[0])
        merged.update(node)
        if merged.get("default", "absent") is None:
            merged.pop("default")
        return _structural(merged, defs)
    if "allOf" in node:
        (only,) = node.pop("allOf")
        merged = dict(only)
        merged.update(node)
        return _structural(merged, defs)

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out["properties"] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties" and isinstance(value, dict):
            out["additionalProperties"] = _structural(value, defs)
        elif key == "default" and value is None:
            continue
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", None)
        if out["additionalProperties"] in (None, False):
            out.pop("additionalProperties")
        # a nested object whose fields all have defaults gets its full default,
        # so the API server fills it in when the user leaves it out
        for name, sub in out["properties"].items():
            if (
                sub.get("type") == "object"
                and "properties" in sub
                and "default" not in sub
                and name not in out.get("required", [])
                and not sub.get("required")
                and "_factory_default" in sub
            ):
                sub["default"] = sub["_factory_default"]
            sub.pop("_factory_default", None)
    return out


def _mark_factory_defaults(model: type, schema: dict[str, Any]) -> None:
    """Record the defaults of object fields that have a default_factory."""
    from pydantic import BaseModel

    def visit(m: type[BaseModel], node: dict[str, Any], defs: dict[str, Any]) -> None:
        props = node.get("properties", {})
        for name, field in m.model_fields.items():
            key = field.alias or name
            if key in props and field.default_factory is not None:
                value = field.default_factory()  # type: ignore[call-arg]
                if isinstance(value, BaseModel):
                    # the full default, so CEL rules on the object see every field
                    props[key]["_factory_default"] = value.model_dump(mode="json", by_alias=True, exclude_none=True)

    defs = schema.get("$defs", {})
    visit(model, schema, defs)
    for sub in _all_models(model):
        if sub.__name__ in defs:
            visit(sub, defs[sub.__name__], defs)


def _all_models(model: type) -> list[type]:
    from pydantic import BaseModel

    seen: list[type] = []
    stack: list[type[BaseModel]] = [model]
    while stack:
        m = stack.pop()
        for field in m.model_fields.values():
            for t in _types_in(field.annotation):
                if isinstance(t, type) and issubclass(t, BaseModel) and t not in seen:
                    seen.append(t)
                    stack.append(t)
    return seen


def _types_in(annotation: Any) -> list[Any]:
    args = getattr(annotation, "__args__", None)
    if not args:
        return [annotation]
    out = []
    for a in args:
        out.extend(_types_in(a))
    return out


def model_schema(model: type) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")  # type: ignore[attr-defined]
    _mark_factory_defaults(model, raw)
    defs = raw.pop("$defs", {})
    return _structural(raw, defs)


def generate_crd() -> dict[str, Any]:
    spec_schema = model_schema(StreamJobSpec)
    spec_schema["description"] = "Desired state of a Spark Structured Streaming job."
    status_schema = model_schema(StreamJobStatus)
    status_schema["description"] = "Observed state of the job, written by the operator."
    status_schema.pop("required", None)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{API_GROUP}"},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": SINGULAR, "shortNames": SHORT_NAMES},
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
                        {"name": "Restarts", "type": "integer", "jsonPath": ".status.totalRestarts"},
                        {"name": "Batch", "type": "integer", "jsonPath": ".status.lastCheckpoint.batchId"},
                        # how long ago, at a glance; the path (long) only with -o wide
                        {"name": "Last-Savepoint", "type": "date", "jsonPath": ".status.lastSavepoint.time"},
                        {"name": "Savepoint", "type": "string", "jsonPath": ".status.lastSavepoint.path", "priority": 1},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A StreamJob runs a Spark Structured Streaming job with savepoints, upgrades and restarts.",
                            "required": ["spec"],
                            "x-kubernetes-validations": name_rules(),
                            "properties": {
                                "apiVersion": {"type": "string", "description": "API version of this object."},
                                "kind": {"type": "string", "description": "Kind of this object."},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def render_crd() -> str:
    header = "# Generated by `python -m streamjob_operator.api.crd` from operator/api/*.py. Do not edit.\n"
    return header + yaml.safe_dump(generate_crd(), sort_keys=False, width=120)


def generated_files() -> dict[Path, str]:
    """Every file generated from the models, with its expected content."""
    from .reference import render_reference

    crd = render_crd()
    files = {p: crd for p in CRD_TARGETS}
    files[REFERENCE_TARGET] = render_reference(generate_crd())
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate (or check) the StreamJob CRD YAML and its reference doc.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    args = parser.parse_args(argv)
    files = generated_files()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"{p}: differs from the models; run python -m streamjob_operator.api.crd", file=sys.stderr)
        return 1 if stale else 0
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
