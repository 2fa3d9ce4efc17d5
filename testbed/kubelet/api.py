"""The kubelet's only door to the API server, with its node credentials.

Called by every other kubelet module that reads or writes Kubernetes objects.
Objects travel as plain dicts in their JSON shape (camelCase), as in manifests.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

Obj = dict[str, Any]


def _json(response: Any) -> Obj:
    return dict(json.loads(response.data))


class KubeletApi:
    def __init__(self, kubeconfig: str) -> None:
        self.api_client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.api_client)
        self.coordination = client.CoordinationV1Api(self.api_client)

    def list_pods(self) -> Obj:
        return _json(self.core.list_pod_for_all_namespaces(_preload_content=False))

    def get_config_map(self, namespace: str, name: str) -> Obj | None:
        try:
            return _json(self.core.read_namespaced_config_map(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_secret(self, namespace: str, name: str) -> Obj | None:
        try:
            return _json(self.core.read_namespaced_secret(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def request_token(
        self, namespace: str, service_account: str, *, pod: Obj, audience: str | None, expiration: int
    ) -> str:
        spec: Obj = {
            "expirationSeconds": expiration,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
            },
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        response = self.core.create_namespaced_service_account_token(
            service_account, namespace, body, _preload_content=False
        )
        return str(_json(response)["status"]["token"])

    def bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.core.create_namespaced_pod_binding(meta["name"], meta["namespace"], body, _preload_content=False)

    def patch_pod_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        self.core.patch_namespaced_pod_status(
            meta["name"],
            meta["namespace"],
            {"metadata": {"uid": meta["uid"]}, "status": status},
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )

    def delete_pod_now(self, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body={"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise


__all__ = ["ApiException", "KubeletApi", "Obj"]
