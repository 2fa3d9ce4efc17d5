"""S3 connection settings, storage URIs, and a small file-store seam over S3 and local disk.

Called by ``streamjob_contract.checkpoint`` and ``job_runtime.savepoints`` (and through
them by the runtime in the driver and by the operator, which imports the savepoint
library without a JVM), and by ``job_runtime.savepoints.cli``.

A location is ``s3://bucket/key``, ``s3a://bucket/key`` (Hadoop's spelling, the
same object store) or ``file:///abs/path`` (a bare absolute path is accepted as
``file://``). ``Store`` gives the copy code one listing/reading/deleting interface
for both, so the savepoint rules are written once.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

Scheme = Literal["s3", "file"]


class LocationError(ValueError):
    """A URI that is not a supported storage location; the message names the URI."""


@dataclass(frozen=True)
class S3Config:
    """How to reach the object store. Credentials never appear in ``repr`` or logs.

    ``None`` credentials mean boto3's default chain (env, web identity, instance
    profile), which is what a pod with IRSA or a mounted Secret wants.
    """

    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool = True
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    max_concurrency: int = 8
    max_attempts: int = 5  # botocore's retries["max_attempts"]: retries after the first attempt
    connect_timeout: float | None = None  # seconds; None: botocore's default (60)
    read_timeout: float | None = None  # seconds; None: botocore's default (60)
    anonymous: bool = False  # unsigned requests: no credentials at all, not even the default chain's

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> S3Config:
        """Reads ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
        ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN`` and
        ``STREAMJOB_S3_PATH_STYLE`` (default true); explicit ``overrides`` that are not
        ``None`` win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "endpoint_url": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None,
            "region": env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            "path_style": env.get("STREAMJOB_S3_PATH_STYLE", "true").strip().lower() not in ("0", "false", "no"),
            "access_key_id": env.get("AWS_ACCESS_KEY_ID") or None,
            "secret_access_key": env.get("AWS_SECRET_ACCESS_KEY") or None,
            "session_token": env.get("AWS_SESSION_TOKEN") or None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def client(self) -> Any:
        """A boto3 S3 client; its connection pool fits ``max_concurrency`` parallel transfers."""
        import boto3  # type: ignore[import-untyped]
        from botocore.config import Config  # type: ignore[import-untyped]

        options: dict[str, Any] = {}
        if self.connect_timeout is not None:
            options["connect_timeout"] = self.connect_timeout
        if self.read_timeout is not None:
            options["read_timeout"] = self.read_timeout
        if self.anonymous:
            from botocore import UNSIGNED  # type: ignore[import-untyped]

            options["signature_version"] = UNSIGNED
        config = Config(
            s3={"addressing_style": "path" if self.path_style else "auto"},
            retries={"max_attempts": self.max_attempts, "mode": "standard"},
            max_pool_connections=max(10, self.max_concurrency * 2),
            **options,
        )
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region or "us-east-1",
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
            config=config,
        )


@dataclass(frozen=True)
class Location:
    """A parsed storage location: a bucket and key prefix, or a local directory."""

    scheme: Scheme
    bucket: str
    path: str  # the S3 key prefix without slashes at either end, or an absolute local path
    uri: str  # as the caller wrote it, for messages

    def child(self, relative: str) -> Location:
        relative = relative.strip("/")
        if self.scheme == "file":
            return Location("file", "", str(Path(self.path) / relative), f"{self.uri.rstrip('/')}/{relative}")
        key = f"{self.path}/{relative}" if self.path else relative
        return Location("s3", self.bucket, key, f"{self.uri.rstrip('/')}/{relative}")

    @property
    def key_prefix(self) -> str:
        """The S3 listing prefix, with a trailing slash so ``job1`` never matches ``job10``."""
        return f"{self.path}/" if self.path else ""

    def __str__(self) -> str:
        return self.uri


def parse_location(uri: str) -> Location:
    """Parses ``s3://``, ``s3a://``, ``file://`` or an absolute path; raises ``LocationError``."""
    if not uri or not uri.strip():
        raise LocationError("location is empty: expected s3://bucket/prefix, s3a://bucket/prefix or file:///path")
    uri = uri.strip()
    if uri.startswith("/"):
        return Location("file", "", os.path.normpath(uri), uri)
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if scheme in ("s3", "s3a"):
        if not parts.netloc:
            raise LocationError(f"{uri}: no bucket: expected {scheme}://bucket/prefix")
        if parts.query or parts.fragment:
            raise LocationError(f"{uri}: query strings and fragments are not allowed in an S3 location")
        key = parts.path.strip("/")
        if any(seg in ("", ".", "..") for seg in key.split("/")) and key:
            raise LocationError(f"{uri}: empty, '.' or '..' path segments are not allowed")
        return Location("s3", parts.netloc, key, uri)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise LocationError(f"{uri}: file:// locations must be local (file:///path), not on host {parts.netloc}")
        if not parts.path.startswith("/"):
            raise LocationError(f"{uri}: file:// location needs an absolute path")
        return Location("file", "", os.path.normpath(parts.path), uri)
    raise LocationError(
        f"{uri}: unsupported scheme {parts.scheme or '(none)'!r}: expected s3://, s3a://, file:// or an absolute path"
    )


@dataclass(frozen=True)
class StoredFile:
    """One file under a location: path relative to it (``/``-separated) and size in bytes.

    ``modified`` (epoch seconds: S3's LastModified, or the local mtime) is what a listing
    said; it takes no part in comparisons, so listings compare by path and size.
    """

    path: str
    size: int
    modified: float | None = field(default=None, compare=False)


class Store:
    """Lists, reads, writes and deletes files under one location, on S3 or local disk.

    S3 listings are lexicographic and local walks are top-down (a directory's files
    before its subdirectories); ``checkpoint`` relies on that so RocksDB snapshot zips
    are listed before the SST files they reference.
    """

    def __init__(self, location: Location, s3: Any | None = None) -> None:
        self.location = location
        self._s3: Any = s3
        if location.scheme == "s3" and s3 is None:
            raise ValueError(f"{location}: an S3 client is needed for an S3 location")

    @property
    def s3(self) -> Any:
        return self._s3

    def local_path(self, relative: str) -> Path:
        return Path(self.location.path) / relative

    def key(self, relative: str) -> str:
        return self.location.child(relative).path

    def list(self, under: str = "") -> Iterator[StoredFile]:
        """Every file below ``under`` (relative), recursively, as paths relative to the location."""
        if self.location.scheme == "file":
            root = Path(self.location.path)
            top = root / under if under else root
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames.sort()
                for name in sorted(filenames):
                    full = Path(dirpath) / name
                    try:
                        stat = full.stat()
                    except FileNotFoundError:  # removed by a running query's cleanup meanwhile
                        continue
                    yield StoredFile(full.relative_to(root).as_posix(), stat.st_size, stat.st_mtime)
            return
        base = self.location.key_prefix
        prefix = base + (under.strip("/") + "/" if under else "")
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.location.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                key: str = obj["Key"]
                if key.endswith("/"):
                    continue  # directory marker objects some tools create
                modified = obj.get("LastModified")
                yield StoredFile(key[len(base) :], int(obj["Size"]), modified.timestamp() if modified is not None else None)

    def subdirectories(self) -> tuple[str, ...]:
        """The names of the location's immediate subdirectories (S3: common prefixes), sorted."""
        if self.location.scheme == "file":
            root = Path(self.location.path)
            return tuple(sorted(p.name for p in root.iterdir() if p.is_dir())) if root.is_dir() else ()
        base = self.location.key_prefix
        paginator = self._s3.get_paginator("list_objects_v2")
        found: set[str] = set()
        for page in paginator.paginate(Bucket=self.location.bucket, Prefix=base, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                name = str(common["Prefix"])[len(base) :].strip("/")
                if name:
                    found.add(name)
        return tuple(sorted(found))

    def remove_empty_directories(self) -> None:
        """Removes what is left of the location's directories once it holds no file: empty local
        folders (the location's own too), or S3 directory marker objects (zero-byte ``.../``
        keys, which Hadoop's S3A writes). Never a file."""
        if self.location.scheme == "file":
            root = Path(self.location.path)
            if not root.is_dir():
                return
            for dirpath, _dirnames, _files in sorted(os.walk(root), key=lambda t: -len(t[0])):
                try:
                    os.rmdir(dirpath)
                except OSError:  # not empty
                    pass
            return
        prefix = self.location.key_prefix
        paginator = self._s3.get_paginator("list_objects_v2")
        markers = [
            obj["Key"]
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=prefix)
            for obj in page.get("Contents", [])
            if obj["Key"].endswith("/") and int(obj["Size"]) == 0
        ]
        if self.location.path and prefix not in markers:
            markers.append(prefix)  # the location's own marker, if S3A wrote one (absent keys are fine)
        for start in range(0, len(markers), 1000):
            self._s3.delete_objects(
                Bucket=self.location.bucket,
                Delete={"Objects": [{"Key": k} for k in markers[start : start + 1000]], "Quiet": True},
            )

    def exists(self, relative: str) -> bool:
        if self.location.scheme == "file":
            return self.local_path(relative).is_file()
        from botocore.exceptions import ClientError  # type: ignore[import-untyped]

        try:
            self._s3.head_object(Bucket=self.location.bucket, Key=self.key(relative))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def read_bytes(self, relative: str) -> bytes:
        """The file's content; ``FileNotFoundError`` when it is absent."""
        if self.location.scheme == "file":
            return self.local_path(relative).read_bytes()
        from botocore.exceptions import ClientError

        try:
            body = self._s3.get_object(Bucket=self.location.bucket, Key=self.key(relative))["Body"]
            data: bytes = body.read()
            return data
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise FileNotFoundError(str(self.location.child(relative))) from exc
            raise

    def write_bytes(self, relative: str, data: bytes, *, content_type: str = "application/octet-stream") -> None:
        """Writes atomically: a local temp file renamed into place, or one S3 PUT."""
        if self.location.scheme == "file":
            target = self.local_path(relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.streamjob.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, target)
            return
        import base64
        import hashlib

        self._s3.put_object(
            Bucket=self.location.bucket,
            Key=self.key(relative),
            Body=data,
            ContentType=content_type,
            ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
        )

    def create_exclusive(self, relative: str, data: bytes, *, content_type: str = "application/json") -> bool:
        """Writes the file only if it does not exist yet; False when it did (nothing written).

        Local: a temporary file hard-linked into place (atomic, never partial). S3: a
        conditional PUT (``If-None-Match: *``); a store that does not implement it gets
        a plain PUT, so there the last of two simultaneous writers wins.
        """
        if self.location.scheme == "file":
            target = self.local_path(relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.streamjob.tmp")
            tmp.write_bytes(data)
            try:
                os.link(tmp, target)
                return True
            except FileExistsError:
                return False
            finally:
                tmp.unlink(missing_ok=True)
        from botocore.exceptions import ClientError

        try:
            self._s3.put_object(
                Bucket=self.location.bucket, Key=self.key(relative), Body=data, ContentType=content_type, IfNoneMatch="*"
            )
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412"):
                return False
            if code not in ("NotImplemented", "501"):
                raise
        if self.exists(relative):
            return False
        self.write_bytes(relative, data, content_type=content_type)
        return True

    def delete(self, relatives: Sequence[str]) -> None:
        """Deletes the given files; absent ones are fine."""
        if self.location.scheme == "file":
            for rel in relatives:
                try:
                    self.local_path(rel).unlink()
                except FileNotFoundError:
                    pass
            return
        for start in range(0, len(relatives), 1000):
            batch = relatives[start : start + 1000]
            response = self._s3.delete_objects(
                Bucket=self.location.bucket,
                Delete={"Objects": [{"Key": self.key(r)} for r in batch], "Quiet": True},
            )
            errors = response.get("Errors") or []
            if errors:
                first = errors[0]
                raise OSError(
                    f"{self.location}: could not delete {len(errors)} file(s), first "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                )

    def delete_under(self, relative: str) -> int:
        """Deletes a folder and everything below it (local folders too); returns how many files went."""
        paths = [f.path for f in self.list(relative)]
        if self.location.scheme == "file":
            folder = self.local_path(relative)
            if folder.is_dir():
                shutil.rmtree(folder)
            return len(paths)
        self.delete(paths)
        return len(paths)

    def delete_all(self) -> int:
        """Deletes everything under the location; returns how many files went."""
        if self.location.scheme == "file":
            root = Path(self.location.path)
            count = sum(1 for _ in self.list())
            if root.exists():
                shutil.rmtree(root)
            return count
        paths = tuple(f.path for f in self.list())
        self.delete(paths)
        return len(paths)
