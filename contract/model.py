"""The base of every typed model of the resource: camelCase names, unknown fields refused.

Imported by ``streamjob_contract.jobdef`` (the job definition) and by
``streamjob_operator.api`` (the StreamJob spec and status, the CRD schema); ``cel``
attaches CEL rules to a model's schema, ``format_validation_error`` words a
validation failure as ``path.field: message`` for users of the CRD and the runtime.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError


class Model(BaseModel):
    """Base for every spec model: unknown fields are errors, names are camelCase."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def cel(rule: str, message: str, field_path: str | None = None) -> dict[str, JsonValue]:
    """One `x-kubernetes-validations` entry (a CEL rule checked by the API server)."""
    entry: dict[str, JsonValue] = {"rule": rule, "message": message}
    if field_path:
        # the API server wants a JSONPath-like ".field"; accept "field" too
        entry["fieldPath"] = field_path if field_path.startswith(".") else "." + field_path
    return entry


def format_validation_error(prefix: str, err: ValidationError) -> str:
    """Render pydantic errors as 'prefix.field.path: message' lines."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        value = e.get("input")
        if isinstance(value, (str, int, float, bool)) and e.get("type") != "missing":
            msg = f"{msg} (got {value!r})"  # a scalar shows what was wrong; objects would only be noise
        lines.append(f"{prefix}.{loc}: {msg}" if loc else f"{prefix}: {msg}")
    return "; ".join(lines)
