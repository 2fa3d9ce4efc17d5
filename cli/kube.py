"""The plugin's only door to the API server: StreamJobs, their events, the driver's log
and (read-only) the S3 credentials Secret a job names.

Called by ``streamjob_cli.main``. Uses the user's kubeconfig like kubectl does:
``--kubeconfig``, else ``$KUBECONFIG`` (a list of files is merged), else
``~/.kube/config``; ``--context`` or the current context; ``-n`` or the context's
namespace, else ``default``. Writes are JSON merge patches of ``spec`` guarded by
the resourceVersion read, so two people bumping a nonce at once never collapse
into one request.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL

DRIVER_CONTAINER = "driver"


class CliError(Exception):
    """A failure the user can act on; its message is printed as is. ``status``: the API's HTTP status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotFound(CliError):
    pass


def job_ref(name: str, namespace: str) -> str:
    return f'streamjob "{name}" in namespace "{namespace}"'


@dataclass
class Kube:
    api: client.ApiClient
    namespace: str

    @classmethod
    def connect(cls, kubeconfig: str | None, context: str | None, namespace: str | None) -> Kube:
        try:
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = active
            if context:
                chosen = next((c for c in contexts if c["name"] == context), None)
                if chosen is None:
                    raise CliError(f'context "{context}" not found in the kubeconfig')
            api = config.new_client_from_config(config_file=kubeconfig, context=context)
        except ConfigException as exc:
            raise CliError(f"no usable kubeconfig: {exc}") from None
        ns = namespace or (chosen or {}).get("context", {}).get("namespace") or "default"
        return cls(api, ns)

    # ---- StreamJobs -----------------------------------------------------------------

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def get(self, name: str) -> dict[str, Any]:
        try:
            job: dict[str, Any] = self._custom().get_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL, name)
        except client.ApiException as exc:
            raise self._error(exc, name) from None
        return job

    def list_jobs(self, all_namespaces: bool) -> list[dict[str, Any]]:
        try:
            if all_namespaces:
                found = self._custom().list_cluster_custom_object(API_GROUP, API_VERSION, PLURAL)
            else:
                found = self._custom().list_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL)
        except client.ApiException as exc:
            raise self._error(exc, None) from None
        items: list[dict[str, Any]] = found.get("items", [])
        return sorted(items, key=lambda j: (j["metadata"].get("namespace", ""), j["metadata"]["name"]))

    def patch_spec(self, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """Merge-patches ``spec`` if the job is unchanged since it was read (409 otherwise)."""
        name = job["metadata"]["name"]
        body = {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"]}, "spec": spec}
        try:
            patched: dict[str, Any] = self._custom().patch_namespaced_custom_object(
                API_GROUP, API_VERSION, self.namespace, PLURAL, name, body,
                _content_type="application/merge-patch+json",
            )
        except client.ApiException as exc:
            raise self._error(exc, name) from None
        return patched

    def events(self, name: str, uid: str | None) -> list[dict[str, Any]]:
        selector = f"involvedObject.name={name},involvedObject.kind=StreamJob"
        if uid:
            selector += f",involvedObject.uid={uid}"
        try:
            found = client.CoreV1Api(self.api).list_namespaced_event(self.namespace, field_selector=selector)
        except client.ApiException as exc:
            raise self._error(exc, name) from None
        return [self.api.sanitize_for_serialization(e) for e in found.items]

    # ---- the driver's log -----------------------------------------------------------

    def driver_log(self, job_name: str, pod: str, *, follow: bool, tail: int | None) -> Iterator[bytes]:
        kwargs: dict[str, Any] = {"container": DRIVER_CONTAINER, "follow": follow, "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        try:
            response = client.CoreV1Api(self.api).read_namespaced_pod_log(pod, self.namespace, **kwargs)
        except client.ApiException as exc:
            raise CliError(f"driver pod {pod} of {job_ref(job_name, self.namespace)}: {_reason(exc)}") from None
        try:
            yield from response.stream(4096)
        finally:
            response.release_conn()

    # ---- S3 credentials (read-only) -------------------------------------------------

    def secret_values(self, job_name: str, secret: str, keys: list[str]) -> dict[str, str]:
        """The named keys of a Secret; the values are returned, never logged or printed."""
        try:
            found = client.CoreV1Api(self.api).read_namespaced_secret(secret, self.namespace)
        except client.ApiException as exc:
            raise CliError(f'credentials Secret "{secret}" of {job_ref(job_name, self.namespace)}: {_reason(exc)}') from None
        data = found.data or {}
        missing = [k for k in keys if k not in data]
        if missing:
            raise CliError(f'credentials Secret "{secret}" of {job_ref(job_name, self.namespace)} has no key {", ".join(missing)}')
        return {k: base64.b64decode(data[k]).decode() for k in keys}

    def _error(self, exc: client.ApiException, name: str | None) -> CliError:
        if exc.status == 404 and name is not None:
            return NotFound(f'streamjob "{name}" not found in namespace "{self.namespace}"', 404)
        where = job_ref(name, self.namespace) if name else f'streamjobs in namespace "{self.namespace}"'
        return CliError(f"{where}: {_reason(exc)}", exc.status)


def _reason(exc: client.ApiException) -> str:
    """The API server's own message (its Status body), else the HTTP reason."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return f"{message or exc.reason} (HTTP {exc.status})"
