"""The kopf glue: thin handlers that run reconcile passes (observe -> decide -> write status -> act).

Registered when ``streamjob_operator.main`` imports this module before
starting kopf. Every trigger — create/update/resume of a StreamJob, a timer,
any change of a driver pod (so a failure is acted on within a second), and
deletion (with kopf's finalizer) — runs the same level-based pass; handlers
never branch on what triggered them. A per-job lock serialises passes of one
job inside this process; the leader Lease (main) keeps other replicas out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import kopf

from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL, SpecError, StreamJobSpec, parse_spec
from streamjob_operator.api.status import StreamJobStatus
from streamjob_operator.k8s.act import ActionFailed, Actor, Outcome
from streamjob_operator.k8s.clients import Clients, load_api_client
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.decide import decide
from streamjob_operator.reconcile.model import Decision
from streamjob_operator.reconcile.observe import observe

log = logging.getLogger("streamjob_operator")

MAX_PASSES = 12  # passes chained in one handler call while each asks to go on at once
TIMER_SECONDS = 2.0


@dataclass
class Settings:
    """Operator-wide settings, filled in by main before kopf starts."""

    layout: RuntimeLayout = field(default_factory=RuntimeLayout)
    repartition_supported: bool = True
    timer_seconds: float = TIMER_SECONDS


SETTINGS = Settings()
_state: dict[str, Any] = {}
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def _clients() -> Clients:
    if "clients" not in _state:
        _state["clients"] = Clients(load_api_client(), SETTINGS.layout)
    clients: Clients = _state["clients"]
    return clients


def _lock(namespace: str, name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault((namespace, name), threading.Lock())


def _status_of(body: dict[str, Any]) -> StreamJobStatus:
    raw = dict(body.get("status") or {})
    known = {f.alias or n for n, f in StreamJobStatus.model_fields.items()}
    return StreamJobStatus.model_validate({k: v for k, v in raw.items() if k in known})


def reconcile(namespace: str, name: str) -> Decision | None:
    """Runs passes for one job until it needs nothing right now; returns the last decision."""
    clients = _clients()
    actor = Actor(clients)
    with _lock(namespace, name):
        decision: Decision | None = None
        for _ in range(MAX_PASSES):
            body = clients.get_streamjob(namespace, name)
            if body is None:
                return None
            meta = body["metadata"]
            owner = Owner(name, namespace, meta["uid"])
            try:
                spec = parse_spec(body.get("spec"))
            except SpecError as err:
                raise kopf.PermanentError(str(err)) from None
            status = _status_of(body)
            now = datetime.now(timezone.utc)
            observations = observe(clients, body, spec, status, now, SETTINGS.repartition_supported)
            decision = decide(spec, status, observations, now)
            if decision.status != status:
                actor.write_status(owner, decision.status)  # the write-ahead log: before any action
            for event in decision.events:
                log.log(logging.WARNING if event.type == "Warning" else logging.INFO,
                        "Recorded event streamjob=%s/%s reason=%s message=%s", namespace, name, event.reason, event.message)
                actor.emit(owner, event)
            _act(actor, owner, spec, decision, clients)
            if decision.deletion_done or decision.requeue_after != 0:
                break
        return decision


def _act(actor: Actor, owner: Owner, spec: StreamJobSpec, decision: Decision, clients: Clients) -> None:
    if not decision.actions:
        return
    pod_ips = {p["metadata"]["name"]: (p.get("status") or {}).get("podIP") for p in clients.driver_pods(owner.namespace, owner.name)}
    for action in decision.actions:
        try:
            outcome = actor.execute(owner, spec, action, pod_ips)
        except ActionFailed as err:
            log.warning("Failed action streamjob=%s/%s action=%s error=%s", owner.namespace, owner.name, type(action).__name__, err)
            continue
        if isinstance(outcome, Outcome) and decision.status.operation is not None:
            op = decision.status.operation.model_copy(update=_python_names(outcome.operation))
            actor.write_status(owner, decision.status.model_copy(update={"operation": op}))


def _python_names(camel: dict[str, Any]) -> dict[str, Any]:
    from streamjob_operator.api.status import Operation

    by_alias = {(f.alias or n): n for n, f in Operation.model_fields.items()}
    return {by_alias[k]: v for k, v in camel.items() if k in by_alias}


# --- kopf handlers --------------------------------------------------------------------------------


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{API_GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=API_GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=API_GROUP, key="last-handled-configuration")
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL)
def on_change(namespace: str | None, name: str, **_: Any) -> None:
    reconcile(namespace or "default", name)


@kopf.timer(API_GROUP, API_VERSION, PLURAL, interval=TIMER_SECONDS, sharp=False)
def on_timer(namespace: str | None, name: str, **_: Any) -> None:
    reconcile(namespace or "default", name)


@kopf.on.event("", "v1", "pods", labels={names.LABEL_ROLE: names.ROLE_DRIVER, names.LABEL_MANAGED_BY: names.MANAGED_BY})
def on_driver_pod(namespace: str | None, labels: Mapping[str, str], type: str, **_: Any) -> None:  # noqa: A002 - kopf's kwarg
    job = labels.get(names.LABEL_JOB)
    if job and namespace and type is not None:  # type None: the initial listing, covered by on.resume
        reconcile(namespace, job)


@kopf.on.delete(API_GROUP, API_VERSION, PLURAL)
def on_delete(namespace: str | None, name: str, **_: Any) -> None:
    decision = reconcile(namespace or "default", name)
    if decision is not None and not decision.deletion_done:
        raise kopf.TemporaryError("waiting for the driver to stop", delay=max(1.0, decision.requeue_after or 1.0))
