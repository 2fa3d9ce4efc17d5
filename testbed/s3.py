"""Starts the test bed's S3 server (versitygw, posix backend) and creates its buckets.

Called by ``testbed.cluster.TestBed.start``. The server listens on 127.0.0.1
on a free port; clients use path-style addressing (boto3 and Spark's s3a alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.proc import ManagedProcess, free_port, port_is_free, start_with_port_retry

REGION = "us-east-1"


@dataclass(frozen=True)
class S3Credentials:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = REGION


@dataclass(frozen=True)
class S3Server:
    process: ManagedProcess
    credentials: S3Credentials


def client(credentials: S3Credentials) -> Any:
    """A boto3 S3 client for the test bed's server (path-style, plain HTTP)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=credentials.endpoint,
        aws_access_key_id=credentials.access_key,
        aws_secret_access_key=credentials.secret_key,
        region_name=credentials.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"}),
    )


def start_s3(
    binary: Path,
    *,
    data_dir: Path,
    log_path: Path,
    buckets: tuple[str, ...],
    access_key: str = "streamjob-testbed",
    secret_key: str = "streamjob-testbed-secret",
    timeout: float = 60.0,
    preferred_port: int | None = None,
    bind_host: str = "127.0.0.1",
    client_host: str = "127.0.0.1",
) -> S3Server:
    """Starts versitygw; on `preferred_port` when it is free (the dev command's
    examples name 127.0.0.1:9000), otherwise on a free port.

    It listens on ``bind_host`` (the real node's bridge address, where pods reach it) and
    clients are given ``client_host`` (there: the bridge's loopback alias, testbed.podnet)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    chosen: dict[str, int] = {}

    def start() -> ManagedProcess:
        port = preferred_port if preferred_port and "port" not in chosen and port_is_free(preferred_port) else free_port()
        chosen["port"] = port
        return ManagedProcess(
            "versitygw",
            [
                str(binary),
                f"--access={access_key}",
                f"--secret={secret_key}",
                f"--port={bind_host}:{port}",
                f"--region={REGION}",
                "posix",
                str(data_dir),
            ],
            log_path,
        )

    def ready(proc: ManagedProcess) -> None:
        creds = S3Credentials(f"http://{client_host}:{chosen['port']}", access_key, secret_key)
        s3 = client(creds)
        proc.wait_ready(lambda: isinstance(s3.list_buckets().get("Buckets"), list), timeout, "serving S3")

    proc = start_with_port_retry(start, ready)
    credentials = S3Credentials(f"http://{client_host}:{chosen['port']}", access_key, secret_key)
    s3 = client(credentials)
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for bucket in buckets:
        if bucket not in existing:
            s3.create_bucket(Bucket=bucket)
    return S3Server(proc, credentials)
