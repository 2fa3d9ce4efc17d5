"""Observe: read the world for one StreamJob into an ``Observations`` value. Read-only.

Called by ``streamjob_operator.handlers`` at the start of every pass. Reads
the job's driver pods (Kubernetes API), the driver's control endpoint
(status; the savepoint request in flight; a warm standby's status) and, when an operation needs it,
the savepoint manifest in S3 and the latest completed batch of the
checkpoint. The endpoint is polled at a bounded rate; what is not read this
pass is ``None`` in the observations.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.runtime_status import RuntimeStatus, SavepointState, SavepointStatus
from streamjob_operator.api.spec import StreamJobSpec
from streamjob_operator.api.status import Phase, StreamJobStatus
from streamjob_operator.k8s.clients import Clients, DriverUnreachable
from streamjob_operator.k8s.errors import describe_error
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.model import (
    DriverPod,
    JobProgress,
    Observations,
    PodPhase,
    Problem,
    SavepointManifest,
    SavepointProgress,
)
from streamjob_operator.reconcile.policy import JOB_POLL_SECONDS, parse_time

log = logging.getLogger(__name__)

MESSAGE_TAIL = 800

def termination_message(raw: str | None) -> str:
    """The runtime writes JSON ({"message": ...}); FallbackToLogsOnError gives a log tail."""
    if not raw:
        return ""
    try:
        data = json.loads(raw)
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])[-MESSAGE_TAIL:]
    except ValueError:
        pass
    lines = [line for line in raw.strip().splitlines() if line.strip() and not line.startswith(("\tat ", "\t... "))]
    headline = next((line for line in lines if "Exception" in line or "Error" in line), None)
    if headline is not None:  # a JVM stack trace: its first line says what happened, the frames do not
        return headline.strip()[:MESSAGE_TAIL]
    return "\n".join(lines[-5:])[-MESSAGE_TAIL:]


# Waiting reasons that mean the container will not start without a change (image, config, scheduling)
STUCK_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                 "CreateContainerError", "RunContainerError", "CrashLoopBackOff")


def reported_savepoint(raw: str | None) -> tuple[str | None, int | None]:
    """The savepoint the runtime wrote into its termination message on a stop-with-savepoint (exit 10)."""
    try:
        data = json.loads(raw or "")
    except ValueError:
        return None, None
    savepoint = data.get("savepoint") if isinstance(data, dict) else None
    if not isinstance(savepoint, dict) or savepoint.get("state") not in (None, SavepointState.COMPLETED.value) or not savepoint.get("path"):
        return None, None
    batch = savepoint.get("batchId")
    return str(savepoint["path"]), int(batch) if isinstance(batch, int) else None


def waiting_reason(status: dict[str, Any]) -> tuple[str | None, str]:
    """Why a pod that is not running does not start: a container's waiting reason, or the scheduler's."""
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in STUCK_REASONS:
            return str(waiting["reason"]), str(waiting.get("message") or "")[-MESSAGE_TAIL:]
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason"):
            return str(cond["reason"]), str(cond.get("message") or "")[-MESSAGE_TAIL:]
    return None, ""


def driver_pod(pod: dict[str, Any]) -> DriverPod:
    meta = pod.get("metadata", {})
    status = pod.get("status", {})
    phase = PodPhase(status.get("phase") or "Pending") if (status.get("phase") or "Pending") in PodPhase._value2member_map_ else PodPhase.unknown
    code: int | None = None
    message = ""
    savepoint: tuple[str | None, int | None] = (None, None)
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") != "driver":
            continue
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            code = int(terminated.get("exitCode", 1))
            message = termination_message(terminated.get("message")) or str(terminated.get("reason") or "")
            savepoint = reported_savepoint(terminated.get("message"))
            if code > 128:  # killed by a signal: the log tail is not the cause
                message = f"killed by signal {code - 128} ({terminated.get('reason') or 'no reason given'}); last output: {message}"
    reason: str | None = None
    if code is None and phase in (PodPhase.pending, PodPhase.unknown):
        reason, detail = waiting_reason(status)
        if reason:
            message = f"{reason}: {detail}" if detail else reason
    if code is not None and phase not in (PodPhase.failed, PodPhase.succeeded):
        phase = PodPhase.succeeded if code == 0 else PodPhase.failed
    epoch = (meta.get("labels") or {}).get(names.LABEL_EPOCH)
    return DriverPod(
        name=meta["name"],
        phase=phase,
        epoch=int(epoch) if epoch and epoch.isdigit() else None,
        ip=status.get("podIP"),
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=code,
        exit_kind=ExitCode.of(code) if code is not None else None,
        message=message,
        waiting_reason=reason,
        deletion_deadline=parse_time(meta.get("deletionTimestamp")),
        savepoint_path=savepoint[0],
        savepoint_batch=savepoint[1],
        evicted_from_lost_node=any(c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                                   and c.get("reason") == "DeletionByTaintManager" for c in status.get("conditions") or []),
        node=(pod.get("spec") or {}).get("nodeName"),
    )


def job_progress(body: dict[str, Any]) -> JobProgress:
    """The driver's ``GET /status`` body, read with its contract type (``RuntimeStatus``).

    A body that is not one (a driver that answers something else) reads as not reachable."""
    try:
        return JobProgress(RuntimeStatus.model_validate(body))
    except ValidationError as err:
        log.debug("Could not read driver status error=%s", err)
        return JobProgress()


def savepoint_progress(body: dict[str, Any]) -> SavepointProgress | None:
    """The driver's ``GET /savepoints/<id>`` body; None when it is not one."""
    try:
        sp = SavepointStatus.model_validate(body)
    except ValidationError:
        return None
    return SavepointProgress(sp.state, sp.path, sp.batch_id, sp.error)


# (namespace, job) -> (driver pod, when its control endpoint first went unanswered since its last answer).
# In memory: an operator that restarts counts again from its own first unanswered poll, which only delays a
# DriverUnreachable restart. One job's passes never run at once (each holds its job's lock, handlers._lock).
# An entry outlives a job deleted while its driver was silent: one small tuple per such job, until a restart.
_UNANSWERED: dict[tuple[str, str], tuple[str, datetime]] = {}


def remember_answer(namespace: str, name: str, pod: str, job: JobProgress, now: datetime) -> JobProgress:
    """``job`` with ``unanswered_since``: the first of this pod's polls that went unanswered since its last answer."""
    key = (namespace, name)
    if job.reachable:
        _UNANSWERED.pop(key, None)
        return job
    first = _UNANSWERED.get(key)
    if first is None or first[0] != pod:
        first = _UNANSWERED[key] = (pod, now)
    return replace(job, unanswered_since=first[1])


def wants_job_poll(status: StreamJobStatus, now: datetime, poll_seconds: float = JOB_POLL_SECONDS) -> bool:
    """True unless the job is Ready with no operation and its driver answered less than ``poll_seconds`` ago."""
    if status.operation is not None or not status.ready or status.job is None:
        return True
    seen = parse_time(status.job.observed_at)
    return seen is None or now - seen >= timedelta(seconds=poll_seconds)


def observe(
    clients: Clients,
    body: dict[str, Any],
    spec: StreamJobSpec,
    status: StreamJobStatus,
    now: datetime,
    repartition_supported: bool,
    poll_seconds: float = JOB_POLL_SECONDS,
) -> Observations:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    raw_pods = clients.driver_pods(namespace, name)
    drivers = tuple(driver_pod(p) for p in raw_pods)
    current = next((d for d in drivers if d.name == status.driver_pod), None)
    op = status.operation
    savepointing = op is not None and op.phase is Phase.savepointing

    job: JobProgress | None = None
    savepoint: SavepointProgress | None = None
    savepoint_unknown = False
    live_ip = current.ip if current is not None and current.alive and current.phase is PodPhase.running else None
    if live_ip and (wants_job_poll(status, now, poll_seconds) or savepointing or meta.get("deletionTimestamp")):
        try:
            reply = clients.driver_call(live_ip, namespace, name, "GET", "/status")
            job = job_progress(reply.body) if reply.status == 200 else JobProgress()
            if savepointing and op is not None and op.trigger_id:
                sp = clients.driver_call(live_ip, namespace, name, "GET", f"/savepoints/{op.trigger_id}")
                if sp.status == 200:
                    savepoint = savepoint_progress(sp.body)
                savepoint_unknown = sp.status == 404  # the POST that named it never arrived (or an older runtime)
        except DriverUnreachable as err:
            log.debug("Could not reach driver streamjob=%s/%s pod=%s error=%s", namespace, name, current.name if current else None, err)
            job = JobProgress()
        if current is not None:
            job = remember_answer(namespace, name, current.name, job, now)

    standby: JobProgress | None = None
    standby_pod = next((d for d in drivers if op is not None and d.name == op.standby_pod and d.name != status.driver_pod), None)
    if standby_pod is not None and standby_pod.alive and standby_pod.phase is PodPhase.running and standby_pod.ip:
        try:  # a warm standby (decide.standby): its /status says when it is ready to take over
            reply = clients.driver_call(standby_pod.ip, namespace, name, "GET", "/status")
            standby = job_progress(reply.body) if reply.status == 200 else JobProgress()
        except DriverUnreachable as err:
            log.debug("Could not reach standby streamjob=%s/%s pod=%s error=%s", namespace, name, standby_pod.name, err)
            standby = JobProgress()

    manifest: SavepointManifest | None = None
    # the checkpoint says what the job committed when its driver cannot: gone, exited, or (an upgraded
    # driver awaiting readiness) not answering; decide.lineage compares it with the savepoint to restore
    unanswered = op is not None and op.phase is Phase.awaiting_ready and (job is None or not job.reachable)
    read_checkpoint = bool(status.checkpoint_location and status.driver_pod and (current is None or current.terminated or unanswered))
    needs_s3 = (savepointing and op is not None and op.savepoint_path) or read_checkpoint
    problems: list[Problem] = []
    s3 = None
    if needs_s3:
        try:
            s3 = clients.s3_config(namespace, spec)
        except Exception as err:  # a missing Secret must not stop the loop: it is reported, the deadlines bound the wait
            problems.append(describe_error(err, "reading the S3 credentials of spec.s3.credentialsSecret"))
    if s3 is not None and savepointing and op is not None and op.savepoint_path:
        from streamjob_contract.savepoint_manifest import SavepointError
        from streamjob_contract.savepoints import inspect_savepoint

        try:
            path, config = op.savepoint_path, s3
            m = clients.s3_call(config, lambda: inspect_savepoint(path, s3_config=config))
            manifest = SavepointManifest(op.savepoint_path, m.batch_id, m.created_at.isoformat(), m.total_bytes)
        except SavepointError:
            pass  # no manifest (yet): no savepoint
        except Exception as err:
            problems.append(describe_error(err, f"reading the savepoint manifest at {op.savepoint_path}"))

    checkpoint_batch: int | None = None
    if s3 is not None and status.checkpoint_location and read_checkpoint:
        from streamjob_contract.checkpoint import latest_completed_batch

        try:
            location, config = status.checkpoint_location, s3
            checkpoint_batch = clients.s3_call(config, lambda: latest_completed_batch(location, s3=config))
        except Exception as err:
            problems.append(describe_error(err, f"reading the checkpoint at {status.checkpoint_location}"))

    return Observations(
        name=name,
        namespace=namespace,
        generation=int(meta.get("generation") or 1),
        uid=str(meta.get("uid") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        drivers=drivers,
        job=job,
        standby=standby,
        savepoint=savepoint,
        savepoint_unknown=savepoint_unknown,
        manifest=manifest,
        checkpoint_batch=checkpoint_batch,
        repartition_supported=repartition_supported,
        problems=tuple(problems),
    )
