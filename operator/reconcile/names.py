"""Deterministic names and labels of everything the operator owns for a StreamJob.

Pure. Called by ``reconcile.decide`` (driver pod and savepoint names recorded in
status before anything is created) and by ``k8s.resources`` (the builders), so
both always agree on what an object is called.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

LABEL_JOB = "streamjob.io/job"
LABEL_ROLE = "streamjob.io/role"
LABEL_EPOCH = "streamjob.io/driver-epoch"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "streamjob-operator"
ROLE_DRIVER = "driver"
ANNOTATION_SPEC_HASH = "streamjob.io/spec-hash"

_MAX_NAME = 63


def _fit(base: str, suffix: str) -> str:
    """``base-suffix`` cut to a DNS label; a hash of the full name keeps cut names distinct."""
    name = f"{base}-{suffix}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    keep = _MAX_NAME - len(suffix) - len(digest) - 2
    return f"{base[:keep].rstrip('-')}-{digest}-{suffix}"


def driver_pod(job: str, epoch: int) -> str:
    return _fit(job, f"driver-{epoch}")


def job_config_map(job: str, epoch: int) -> str:
    """One ConfigMap per driver epoch: a restarted old driver never reads a newer job definition."""
    return _fit(job, f"job-{epoch}")


def token_secret(job: str) -> str:
    return _fit(job, "token")


def driver_service(job: str) -> str:
    return _fit(job, "driver")


def driver_service_account(job: str) -> str:
    return _fit(job, "driver")


def driver_role(job: str) -> str:
    return _fit(job, "driver")


def checkpoint_location(base: str, job: str, uid: str, epoch: int) -> str:
    """A fresh checkpoint location per seeded state (first deploy, savepoint restore, stateless).

    Under a directory of this job's own (name and UID): two StreamJobs given the same
    spec.checkpoint.location, or a job deleted and created again under its old name,
    never write one checkpoint (the runtime's ownership marker checks it too).
    """
    owner = f"{job}-{uid[:8]}" if uid else job
    return f"{base.rstrip('/')}/{owner}/run-{epoch}"


def savepoint_path(location: str, job: str, trigger: str, at: datetime) -> str:
    """``<spec.savepoint.location>/<job>-<UTC time>-<trigger>``: the location is usually per job already."""
    return f"{location.rstrip('/')}/{job}-{at.strftime('%Y%m%dT%H%M%SZ')}-{trigger}"


def job_labels(job: str) -> dict[str, str]:
    return {LABEL_JOB: job, LABEL_MANAGED_BY: MANAGED_BY}


def driver_labels(job: str, epoch: int) -> dict[str, str]:
    return {**job_labels(job), LABEL_ROLE: ROLE_DRIVER, LABEL_EPOCH: str(epoch)}


def driver_selector(job: str) -> str:
    """Label selector of every driver pod of a job, whatever its epoch."""
    return f"{LABEL_JOB}={job},{LABEL_ROLE}={ROLE_DRIVER}"
