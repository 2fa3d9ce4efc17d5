"""RBAC rules against the API server's audit log: which rule each request used, which rules none did.

The test bed's kube-apiserver logs every request of a service account
(``testbed.control_plane.AUDIT_POLICY``). A rule is expanded into permissions,
one per (apiGroup, resource, verb); a request uses a permission when group,
resource (with its subresource), verb and, where the rule lists them, the
object's name match. A permission no request used can be removed without any
request being denied: that rule is wider than the lifecycle needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Request:
    user: str
    verb: str
    group: str
    resource: str  # "pods", "pods/log", ...
    namespace: str | None
    name: str | None
    code: int
    at: datetime


@dataclass(frozen=True)
class Permission:
    """One verb on one resource of one rule, in the place the rule applies (a namespace, or "*" cluster-wide)."""

    where: str
    group: str
    resource: str
    verb: str
    names: tuple[str, ...] = ()

    def allows(self, req: Request) -> bool:
        return (
            (self.where == "*" or self.where == req.namespace)
            and self.group == req.group
            and self.resource == req.resource
            and self.verb == req.verb
            and (not self.names or req.name in self.names)
        )

    def __str__(self) -> str:
        group = self.group or "core"
        names = f" {list(self.names)}" if self.names else ""
        return f"{self.verb} {group}/{self.resource}{names} in {self.where}"


def requests(audit_log: Path, users: Iterable[str], since: datetime) -> list[Request]:
    """Completed requests of these users (exact usernames) received at or after ``since`` (UTC, aware)."""
    wanted = set(users)
    found: list[Request] = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        # a watch is logged when it starts (ResponseStarted) and again only when it ends
        if event.get("stage") not in ("ResponseStarted", "ResponseComplete") or event["user"]["username"] not in wanted:
            continue
        ref = event.get("objectRef")
        if ref is None:  # discovery and other non-resource URLs: not governed by these rules
            continue
        at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if at < since:
            continue
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append(Request(event["user"]["username"], event["verb"], ref.get("apiGroup", ""), resource,
                             ref.get("namespace"), ref.get("name"), int(event.get("responseStatus", {}).get("code", 0)), at))
    return found


def permissions(rules: Sequence[Any], where: str) -> list[Permission]:
    """Expand RBAC rules (kubernetes client models or plain dicts) into permissions."""
    out: list[Permission] = []
    for rule in rules:
        r = rule if isinstance(rule, dict) else rule.to_dict()
        groups = r.get("apiGroups") or r.get("api_groups") or []
        names = tuple(r.get("resourceNames") or r.get("resource_names") or ())
        for group in groups:
            for resource in r["resources"]:
                for verb in r["verbs"]:
                    out.append(Permission(where, group, resource, verb, names))
    return out


def unused(perms: Sequence[Permission], reqs: Sequence[Request]) -> list[Permission]:
    return [p for p in perms if not any(p.allows(q) for q in reqs)]


def first_use(perms: Sequence[Permission], reqs: Sequence[Request], steps: Sequence[tuple[str, datetime]]) -> dict[str, str]:
    """Permission -> the name of the step (steps: (name, start), in order) of the first request that used it."""
    def step_of(at: datetime) -> str:
        name = steps[0][0]
        for step, start in steps:
            if at >= start:
                name = step
        return name

    return {str(p): step_of(min(q.at for q in reqs if p.allows(q))) for p in perms if any(p.allows(q) for q in reqs)}
