"""Act: the only code that changes the world (Kubernetes objects, S3 savepoints, the driver).

Called by ``streamjob_operator.handlers`` after ``reconcile.decide`` and
after the decided status is written (the write-ahead log). Every action is
idempotent: "already exists" and "not found" are success, so a pass that is
repeated after an operator crash does no harm.
"""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from kubernetes.client.rest import ApiException

from streamjob_operator.api.spec import API_GROUP, API_VERSION, KIND, PLURAL, StreamJobSpec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.k8s import resources
from streamjob_operator.k8s.clients import Clients, DriverUnreachable, decode
from streamjob_operator.k8s.resources import Owner
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.model import (
    Action,
    CreateDriver,
    DeleteDriver,
    DeleteOwnedObjects,
    DeleteSavepoint,
    EnsureSupportObjects,
    Event,
    ReleaseStandby,
    TriggerSavepoint,
)

log = logging.getLogger(__name__)
COMPONENT = "streamjob-operator"


class ActionFailed(Exception):
    """An action that could not be done now; reported in status and an event, and retried by a later pass."""

    def __init__(self, message: str, reason: str = "ActionFailed") -> None:
        super().__init__(message)
        self.reason = reason


def describe_action(action: Action) -> str:
    """What an action does, for error messages: "creating driver pod wc-driver-2"."""
    if isinstance(action, CreateDriver):
        return f"creating driver pod {action.pod}"
    if isinstance(action, DeleteDriver):
        return f"deleting driver pod {action.pod}"
    if isinstance(action, TriggerSavepoint):
        return f"asking driver {action.pod} for a savepoint at {action.path}"
    if isinstance(action, DeleteSavepoint):
        return f"pruning savepoint {action.path}"
    if isinstance(action, ReleaseStandby):
        return f"releasing standby driver {action.pod} to restore {action.restore_from}"
    if isinstance(action, EnsureSupportObjects):
        return "creating the driver's token Secret, Service and service account"
    return "deleting the job's objects"


@dataclass(frozen=True)
class Outcome:
    """What an action learned that the write-ahead log must keep (e.g. the savepoint request id)."""

    trigger_id: str  # status.operation.triggerId


def _ignore(*statuses: int) -> Callable[[Callable[[], Any]], Any]:
    def run(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ApiException as err:
            if err.status in statuses:
                return None
            raise
    return run


_exists_ok = _ignore(409)
_gone_ok = _ignore(404)


def no_fence() -> None:
    """The fence of an operator without leader election: every write may go."""


class Actor:
    """Every write of a pass goes through here; ``fence`` runs first and raises when this replica may not write
    (``LeaderElector.ensure_leading``: a replica past its Lease deadline steps down instead of writing)."""

    def __init__(self, clients: Clients, fence: Callable[[], None] = no_fence, write_timeout: float | None = None) -> None:
        self.clients = clients
        self.fence = fence
        self.write_timeout = write_timeout  # Timings.write_timeout() under leader election

    # --- status and events -------------------------------------------------------------------
    def write_status(self, owner: Owner, status: StreamJobStatus, resource_version: str | None = None) -> str | None:
        """Writes status; with ``resource_version`` only onto that version of the object (the API server answers
        409 Conflict when another writer came between: the pass's write-ahead record is then not written over
        a newer one, and the pass is retried from a fresh read). Returns the object's new resourceVersion."""
        body: dict[str, Any] = {"status": status.model_dump(mode="json", by_alias=True)}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        self.fence()
        extra: dict[str, Any] = {"_request_timeout": self.write_timeout} if self.write_timeout else {}
        written = self.clients.custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, owner.namespace, PLURAL, owner.name, body, **extra)
        if not isinstance(written, dict):
            return None
        self.clients.cache.saw_job(written)  # the object as stored: the next pass reads it, not an older watch event
        version = written.get("metadata", {}).get("resourceVersion")
        return str(version) if version else None

    def emit(self, owner: Owner, event: Event) -> None:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "metadata": {"name": f"{owner.name}.{uuid.uuid4().hex[:12]}", "namespace": owner.namespace},
            "involvedObject": {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": owner.name,
                               "namespace": owner.namespace, "uid": owner.uid},
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.fence()
        try:
            self.clients.core.create_namespaced_event(owner.namespace, body)
        except ApiException as err:  # an event is information, never a reason to fail the pass
            log.warning("Failed to post event streamjob=%s/%s reason=%s status=%s", owner.namespace, owner.name, event.reason, err.status)

    # --- actions -------------------------------------------------------------------------------
    def execute(self, owner: Owner, spec: StreamJobSpec, action: Action, pod_ips: dict[str, str | None]) -> Outcome | None:
        self.fence()
        if isinstance(action, EnsureSupportObjects):
            self.ensure_support(owner, spec, action)
        elif isinstance(action, CreateDriver):
            self.create_driver(owner, action)
        elif isinstance(action, DeleteDriver):
            self.delete_driver(owner, action)
        elif isinstance(action, TriggerSavepoint):
            return self.trigger_savepoint(owner, action, pod_ips.get(action.pod))
        elif isinstance(action, ReleaseStandby):
            self.release_standby(owner, action, pod_ips.get(action.pod))
        elif isinstance(action, DeleteSavepoint):
            self.delete_savepoint(owner, spec, action)
        elif isinstance(action, DeleteOwnedObjects):
            self.delete_owned(owner)
        return None

    def ensure_support(self, owner: Owner, spec: StreamJobSpec, action: EnsureSupportObjects) -> None:
        core, rbac, ns = self.clients.core, self.clients.rbac, owner.namespace
        if action.service_account is None:
            _exists_ok(lambda: core.create_namespaced_service_account(ns, resources.driver_service_account(owner)))
            _exists_ok(lambda: rbac.create_namespaced_role(ns, resources.driver_role(owner)))
            _exists_ok(lambda: rbac.create_namespaced_role_binding(ns, resources.driver_role_binding(owner)))
        created = _exists_ok(lambda: core.create_namespaced_secret(ns, resources.token_secret(owner, secrets.token_urlsafe(32))))
        if created is not None:
            self.clients.forget_token(ns, owner.name)
            log.info("Created token secret streamjob=%s/%s secret=%s", ns, owner.name, names.token_secret(owner.name))
        _exists_ok(lambda: core.create_namespaced_service(ns, resources.driver_service(owner, self.clients.layout)))

    def create_driver(self, owner: Owner, action: CreateDriver) -> None:
        core, ns = self.clients.core, owner.namespace
        spec = StreamJobSpec.model_validate(json.loads(action.spec_json))
        # ConfigMaps of earlier epochs: no driver that could read them is left (decide guarantees it), but the
        # running driver's while a standby starts (keep_epoch)
        keep = {str(action.epoch)} | ({str(action.keep_epoch)} if action.keep_epoch is not None else set())
        stale = decode(core.list_namespaced_config_map(ns, label_selector=f"{names.LABEL_JOB}={owner.name},{names.LABEL_EPOCH}",
                                                       _preload_content=False))["items"]
        for cm in stale:
            if cm["metadata"]["labels"].get(names.LABEL_EPOCH) not in keep:
                _gone_ok(lambda: core.delete_namespaced_config_map(cm["metadata"]["name"], ns))
        _exists_ok(lambda: core.create_namespaced_config_map(ns, resources.job_config_map(owner, spec, action.epoch)))
        pod = resources.driver_pod(owner, spec, action, self.clients.layout)
        self.fence()  # again, right before the write that must never come from a replaced leader
        self.clients.cache.touched(ns, owner.name)  # the next pass lists: this pod's watch event may lag
        if _exists_ok(lambda: core.create_namespaced_pod(ns, pod)) is not None:
            log.info("Created driver pod streamjob=%s/%s pod=%s checkpoint=%s restoreFrom=%s",
                     ns, owner.name, action.pod, action.checkpoint_location, action.restore_from)

    def delete_driver(self, owner: Owner, action: DeleteDriver) -> None:
        kwargs: dict[str, Any] = {}
        if action.grace_seconds is not None:
            kwargs["grace_period_seconds"] = action.grace_seconds
        self.clients.cache.touched(owner.namespace, owner.name)
        if _gone_ok(lambda: self.clients.core.delete_namespaced_pod(action.pod, owner.namespace, **kwargs)) is not None:
            log.info("Deleted driver pod streamjob=%s/%s pod=%s grace=%s", owner.namespace, owner.name, action.pod, action.grace_seconds)

    def trigger_savepoint(self, owner: Owner, action: TriggerSavepoint, pod_ip: str | None) -> Outcome | None:
        if not pod_ip:
            raise ActionFailed(f"driver pod {action.pod} has no IP yet", "DriverUnreachable")
        try:
            body: dict[str, Any] = {"path": action.path, "stop": action.stop}
            if action.trigger_id:
                body["id"] = action.trigger_id
            reply = self.clients.driver_call(pod_ip, owner.namespace, owner.name, "POST", "/savepoints", body)
        except DriverUnreachable as err:
            raise ActionFailed(f"could not ask driver {action.pod} for a savepoint: {err}", "DriverUnreachable") from None
        if reply.status == 202:
            log.info("Triggered savepoint streamjob=%s/%s pod=%s path=%s stop=%s id=%s",
                     owner.namespace, owner.name, action.pod, action.path, action.stop, reply.body.get("id"))
            return _renamed(action, str(reply.body.get("id")))
        if reply.status == 409:  # one in progress: ours, if an earlier pass triggered it before a crash
            listing = self.clients.driver_call(pod_ip, owner.namespace, owner.name, "GET", "/savepoints")
            for sp in reversed(listing.body.get("savepoints") or []):
                if sp.get("path") == action.path:
                    return _renamed(action, str(sp.get("id")))
        raise ActionFailed(f"driver {action.pod} refused the savepoint: HTTP {reply.status} {reply.body.get('error', '')}",
                           "SavepointRefused")

    def release_standby(self, owner: Owner, action: ReleaseStandby, pod_ip: str | None) -> None:
        if not pod_ip:
            raise ActionFailed(f"standby driver {action.pod} has no IP", "DriverUnreachable")
        try:
            reply = self.clients.driver_call(pod_ip, owner.namespace, owner.name, "POST", "/release",
                                             {"restoreFrom": action.restore_from})
        except DriverUnreachable as err:
            raise ActionFailed(f"could not release standby driver {action.pod}: {err}", "DriverUnreachable") from None
        if reply.status != 202:
            raise ActionFailed(f"standby driver {action.pod} refused the release: HTTP {reply.status} "
                               f"{reply.body.get('error', '')}", "ReleaseRefused")
        log.info("Released standby streamjob=%s/%s pod=%s restoreFrom=%s state=%s",
                 owner.namespace, owner.name, action.pod, action.restore_from, reply.body.get("state"))

    def delete_savepoint(self, owner: Owner, spec: StreamJobSpec, action: DeleteSavepoint) -> None:
        from streamjob_contract.savepoints import delete_savepoint

        config = self.clients.s3_config(owner.namespace, spec)
        self.clients.s3_call(config, lambda: delete_savepoint(action.path, s3_config=config))
        log.info("Pruned savepoint streamjob=%s/%s path=%s", owner.namespace, owner.name, action.path)

    def delete_owned(self, owner: Owner) -> None:
        core, rbac, ns = self.clients.core, self.clients.rbac, owner.namespace
        selector = f"{names.LABEL_JOB}={owner.name},{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"
        for cm in decode(core.list_namespaced_config_map(ns, label_selector=selector, _preload_content=False))["items"]:
            _gone_ok(lambda: core.delete_namespaced_config_map(cm["metadata"]["name"], ns))
        _gone_ok(lambda: core.delete_namespaced_service(names.driver_service(owner.name), ns))
        _gone_ok(lambda: core.delete_namespaced_secret(names.token_secret(owner.name), ns))
        _gone_ok(lambda: rbac.delete_namespaced_role_binding(names.driver_role(owner.name), ns))
        _gone_ok(lambda: rbac.delete_namespaced_role(names.driver_role(owner.name), ns))
        _gone_ok(lambda: core.delete_namespaced_service_account(names.driver_service_account(owner.name), ns))
        self.clients.forget_token(ns, owner.name)
        log.info("Deleted owned objects streamjob=%s/%s", ns, owner.name)


def _renamed(action: TriggerSavepoint, driver_id: str) -> Outcome | None:
    """The driver's id for the request when it is not the one decide recorded (a runtime older than 0.2 names
    its requests itself): only then does the pass write status a second time."""
    return None if driver_id == action.trigger_id else Outcome(trigger_id=driver_id)
