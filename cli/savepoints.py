"""Reading savepoints for ``inspect`` and ``history --sizes``: read-only, with the runtime's
own manifest reader and validator (``streamjob_contract.savepoints``).

Called by ``streamjob_cli.main``. S3 settings come from the environment (``AWS_*``,
as boto3 and ``streamjob-savepoints`` read them) or, with ``--job NAME``, from that
job's ``spec.s3`` and its credentials Secret. Credentials live only in the
``S3Config`` (whose repr hides them); nothing here prints them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from streamjob_contract import savepoints as sp
from streamjob_contract.s3 import S3Config
from streamjob_contract.savepoint_manifest import SavepointError

from .kube import CliError, Kube, job_ref


def s3_config(kube: Kube | None, job_name: str | None) -> S3Config:
    """The environment's settings, overridden by the job's ``spec.s3`` when a job is named."""
    if kube is None or job_name is None:
        return S3Config.from_env()
    job = kube.get(job_name)
    s3 = (job.get("spec") or {}).get("s3")
    if not s3:
        raise CliError(f"{job_ref(job_name, kube.namespace)} has no spec.s3: give the S3 settings in AWS_* variables instead")
    overrides: dict[str, Any] = {
        "endpoint_url": s3.get("endpoint"), "region": s3.get("region"), "path_style": bool(s3.get("pathStyleAccess", False)),
    }
    ref = s3.get("credentialsSecret")
    if ref:
        id_key = ref.get("accessKeyIdKey", "AWS_ACCESS_KEY_ID")
        secret_key = ref.get("secretAccessKeyKey", "AWS_SECRET_ACCESS_KEY")
        values = kube.secret_values(job_name, ref["name"], [id_key, secret_key])
        overrides.update(access_key_id=values[id_key], secret_access_key=values[secret_key], session_token=None)
    config = S3Config.from_env(**overrides)
    # the Secret's keys, never with an ambient session token that belongs to other keys
    return dataclasses.replace(config, session_token=None) if ref else config


def inspect(uri: str, config: S3Config, *, verify_checksums: bool) -> dict[str, Any]:
    """The manifest, validated (files present, sizes and, unless told not to, SHA-256).

    Raises ``streamjob_contract.savepoint_manifest.SavepointError`` (its message names the file) when the
    savepoint is refused."""
    manifest = sp.validate_savepoint(uri, None, verify_checksums=verify_checksums, s3_config=config)
    return {
        "uri": uri,
        "valid": True,
        "checksumsVerified": verify_checksums,
        "batchId": manifest.batch_id,
        "plannedBatchId": manifest.planned_batch_id,
        "job": {"namespace": manifest.job.namespace, "name": manifest.job.name, "hash": manifest.job.hash},
        "statePartitions": manifest.state_partitions,
        "stateStoreProvider": manifest.state_store_provider,
        "stateOperators": list(manifest.state_operators),
        "watermarkMs": manifest.watermark_ms,
        "sparkVersion": manifest.spark_version,
        "createdAt": manifest.created_at.isoformat(),
        "sourceCheckpoint": manifest.source_checkpoint,
        "files": len(manifest.files),
        "totalBytes": manifest.total_bytes,
    }


def sizes(paths: list[str], config: S3Config) -> dict[str, int | None]:
    """Each savepoint's total size from its manifest; None where it cannot be read (e.g. pruned)."""
    out: dict[str, int | None] = {}
    for path in paths:
        try:
            out[path] = sp.inspect_savepoint(path, s3_config=config).total_bytes
        except SavepointError:
            out[path] = None
    return out
