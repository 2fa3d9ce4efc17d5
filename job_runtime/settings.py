"""The runtime's settings: what the `run` command was asked to do, as one frozen value.

Built by job_runtime.main from the command line; read by job_runtime.run.runner,
job_runtime.query.session and the job builders. Pure: no Spark import, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from streamjob_contract.jobdef import DURATION_PATTERN

AVAILABLE_NOW = "available-now"


class SettingsError(ValueError):
    """A command-line setting that cannot be used; the message names the option."""


@dataclass(frozen=True)
class S3Settings:
    """Where S3 is; credentials are never here (only AWS_* environment variables)."""

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style: bool = False


@dataclass(frozen=True)
class RuntimeSettings:
    job_file: Path
    name: str
    namespace: str
    checkpoint_location: str
    state_partitions: int
    trigger_interval: str = "10 seconds"
    restore_from: str | None = None
    allow_non_restored_state: bool = False
    savepoint_location: str | None = None
    control_address: str | None = "127.0.0.1:0"
    control_address_file: Path | None = None
    token_file: Path | None = None
    termination_message_file: Path | None = None
    s3: S3Settings = field(default_factory=S3Settings)
    master: str | None = None
    spark_conf: tuple[tuple[str, str], ...] = ()
    job_hash: str = ""
    owner_uid: str | None = None
    expect_committed: int | None = None  # the operator's status.lastCheckpoint.batchId; a checkpoint behind it is refused
    savepoint_timeout_seconds: float | None = None  # abandoned savepoint directories older than this are pruned
    hygiene_interval_seconds: float = 300.0  # between two storage hygiene passes (job_runtime.checkpoints.janitor)
    standby: bool = False  # warm standby: wait for POST /release before touching the checkpoint (job_runtime.run.runner)

    @property
    def available_now(self) -> bool:
        """A bounded run: process what is there, then end (exit 0)."""
        return self.trigger_interval == AVAILABLE_NOW

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"


CHECKPOINT_SCHEMES = ("s3a://", "file://", "file:/")
SAVEPOINT_SCHEMES = ("s3://", "s3a://", "file://", "file:/")


def validate(settings: RuntimeSettings) -> RuntimeSettings:
    """Check cross-option rules; raises SettingsError naming the option."""
    if not settings.checkpoint_location.startswith(CHECKPOINT_SCHEMES):
        raise SettingsError(f"--checkpoint: must start with s3a:// or file://, got {settings.checkpoint_location!r}")
    if settings.state_partitions < 1:
        raise SettingsError(f"--state-partitions: must be >= 1, got {settings.state_partitions}")
    if not settings.available_now and not re.match(DURATION_PATTERN, settings.trigger_interval):
        raise SettingsError(
            f"--trigger-interval: expected an interval like '10 seconds' or {AVAILABLE_NOW!r}, got {settings.trigger_interval!r}"
        )
    for option, value in (("--restore-from", settings.restore_from), ("--savepoint-location", settings.savepoint_location)):
        if value is not None and not value.startswith(SAVEPOINT_SCHEMES):
            raise SettingsError(f"{option}: must start with s3://, s3a:// or file://, got {value!r}")
    if settings.owner_uid is not None and not settings.owner_uid.strip():
        raise SettingsError("--owner-uid: must not be empty (the StreamJob's metadata.uid)")
    if settings.expect_committed is not None and settings.expect_committed < 0:
        raise SettingsError(f"--expect-committed: must be >= 0, got {settings.expect_committed}")
    if settings.savepoint_timeout_seconds is not None and not settings.savepoint_timeout_seconds > 0:
        raise SettingsError(f"--savepoint-timeout-seconds: must be > 0, got {settings.savepoint_timeout_seconds:g}")
    if not settings.hygiene_interval_seconds > 0:
        raise SettingsError(f"--hygiene-interval-seconds: must be > 0, got {settings.hygiene_interval_seconds:g}")
    if settings.standby and not settings.control_address:
        raise SettingsError("--standby: needs the control endpoint (--control-address): the release comes through it")
    if settings.standby and settings.restore_from is not None:
        raise SettingsError("--standby: the savepoint to restore comes with the release; drop --restore-from")
    if settings.control_address and settings.token_file is None:
        raise SettingsError("--token-file: required when the control endpoint is on (--control-address)")
    uses_s3 = any(
        v is not None and v.startswith(("s3://", "s3a://"))
        for v in (settings.checkpoint_location, settings.restore_from, settings.savepoint_location)
    )
    if uses_s3 and settings.s3.endpoint is not None and not settings.s3.endpoint.startswith(("http://", "https://")):
        raise SettingsError(f"--s3-endpoint: must start with http:// or https://, got {settings.s3.endpoint!r}")
    return settings
