"""What a change to each spec field requires, as data: the table the decision code diffs against.

Pure. Called by ``reconcile.decide`` to classify the difference between
``status.lastReconciledSpec`` and the current spec. Fields are the CRD's
camelCase paths; the most specific entry wins; a field missing from the table
is treated as needing a savepoint redeploy (the safe choice), and a unit test
fails when a spec field has no entry.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ChangeKind(IntEnum):
    """Ordered by how much they disturb the job: the largest one in a diff wins."""

    ignore = 0  # operator-side settings, read live (restart policy, retention, ...)
    restart_only = 1  # restart the driver from the latest checkpoint
    savepoint_redeploy = 2  # roll out by spec.upgradeMode (savepoint, last-state, stateless)
    state_repartition = 3  # state partitions: savepoint + offline repartition, or refused
    savepoint_restore = 4  # savepointRedeployNonce: discard the current state, restore initialSavepointPath


CHANGE_TABLE: dict[str, ChangeKind] = {
    "image": ChangeKind.savepoint_redeploy,
    "imagePullPolicy": ChangeKind.savepoint_redeploy,
    "serviceAccountName": ChangeKind.savepoint_redeploy,
    "imagePullSecrets": ChangeKind.savepoint_redeploy,
    "podTemplate": ChangeKind.savepoint_redeploy,
    "job": ChangeKind.savepoint_redeploy,
    "sparkConf": ChangeKind.savepoint_redeploy,
    "driver": ChangeKind.savepoint_redeploy,
    "executor": ChangeKind.savepoint_redeploy,
    "checkpoint": ChangeKind.savepoint_redeploy,
    "checkpoint.acceptBehindBatch": ChangeKind.ignore,  # read at the next driver's start (docs/operations.md)
    "s3": ChangeKind.savepoint_redeploy,
    "statePartitions": ChangeKind.state_repartition,
    "restartNonce": ChangeKind.restart_only,
    "savepointRedeployNonce": ChangeKind.savepoint_restore,
    # read when needed, no redeploy
    "savepoint": ChangeKind.ignore,
    "upgradeMode": ChangeKind.ignore,
    "restartPolicy": ChangeKind.ignore,
    "rollback": ChangeKind.ignore,
    "standby": ChangeKind.ignore,  # read when the next upgrade starts
    "deletion": ChangeKind.ignore,
    "initialSavepointPath": ChangeKind.ignore,  # first deploy only
    "allowNonRestoredState": ChangeKind.ignore,  # read at the next restore
    "savepointNonce": ChangeKind.ignore,  # a request, compared with status.lastSavepointNonce
    "state": ChangeKind.ignore,  # suspend/resume is a lifecycle transition, not a diff
}


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``; lists are leaves (compared whole)."""
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: data}


def kind_of(path: str) -> ChangeKind:
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        found = CHANGE_TABLE.get(".".join(parts[:n]))
        if found is not None:
            return found
    return ChangeKind.savepoint_redeploy


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> dict[str, ChangeKind]:
    """Every differing field path, with what it needs."""
    a, b = flatten(old), flatten(new)
    return {path: kind_of(path) for path in sorted(set(a) | set(b)) if a.get(path) != b.get(path)}


def classify(old: dict[str, Any], new: dict[str, Any]) -> ChangeKind:
    """What rolling out ``new`` over ``old`` requires: the largest kind among the changed fields."""
    return max(changed_fields(old, new).values(), default=ChangeKind.ignore)
