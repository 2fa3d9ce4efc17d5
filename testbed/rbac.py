"""RBAC objects the test bed installs at start: what its process kubelet may do.

Called by ``testbed.cluster`` with the admin client, before the kubelet starts.
The kubelet authenticates as ``system:node:<name>`` in ``system:nodes``; the
Node authorizer covers part of its needs, this ClusterRole the rest (binding
pods, as the scheduler would, and removing them).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

KUBELET_ROLE = "streamjob-testbed:kubelet"


def kubelet_cluster_role() -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": KUBELET_ROLE},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "patch", "update"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "create", "patch", "update"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch", "update"]},
            {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update", "patch"]},
        ],
    }


def kubelet_binding(node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": KUBELET_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBELET_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{node_name}"}],
    }


def install(api_client: client.ApiClient, node_name: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)
    for create, body in (
        (rbac.create_cluster_role, kubelet_cluster_role()),
        (rbac.create_cluster_role_binding, kubelet_binding(node_name)),
    ):
        try:
            create(body)
        except ApiException as exc:
            if exc.status != 409:
                raise
