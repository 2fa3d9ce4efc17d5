"""Moving savepoint bytes between stores, each copy hashed (SHA-256).

S3 to S3 is a server-side copy (``copy_object`` with ``ChecksumAlgorithm=SHA256``; boto3's
managed multipart copy for big files); local to S3 goes through boto3's transfer manager
with the locally computed SHA-256 sent along, so the store verifies it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from job_runtime import testhooks
from streamjob_contract.savepoints import sha256_file, sha256_object
from streamjob_contract.s3 import S3Config, Store, StoredFile
from streamjob_contract.savepoint_manifest import (
    CHUNK,
    MULTIPART_THRESHOLD,
    SavepointChecksumError,
    b64_from_hex,
    hex_from_b64,
)


class Transfer:
    """Copies files from one store to another and returns each copy's SHA-256 (hex).

    One object per operation; chooses server-side copy, transfer-manager upload or
    download, or a local copy by the pair of schemes.
    """

    def __init__(self, src: Store, dst: Store, s3_config: S3Config, client: Any | None, point: str = "copy") -> None:
        from boto3.s3.transfer import TransferConfig  # type: ignore[import-untyped]

        self.point = point  # the test hook's name for a copied file (job_runtime.testhooks)
        self.src = src
        self.dst = dst
        self.client: Any = client
        self.concurrency = max(1, s3_config.max_concurrency)
        self.config = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD,
            multipart_chunksize=16 * 1024 * 1024,
            max_concurrency=self.concurrency,
            use_threads=True,
        )

    def run(self, files: list[StoredFile], expected: dict[str, str] | None = None) -> dict[str, str]:
        """Copies ``files``; with ``expected`` (path -> sha256) a mismatch raises ``SavepointChecksumError``."""
        pair = (self.src.location.scheme, self.dst.location.scheme)
        if pair == ("file", "s3"):
            digests = self._upload(files)
        elif pair == ("s3", "file"):
            digests = self._download(files)
        elif pair == ("s3", "s3"):
            digests = self._pool(files, self._copy_s3)
        else:
            digests = self._pool(files, self._copy_local)
        if expected is not None:
            for f in files:
                want, got = expected[f.path], digests[f.path]
                if want != got:
                    raise SavepointChecksumError(
                        str(self.src.location),
                        f"file {f.path}: checksum mismatch (manifest sha256 {want[:12]}…, found {got[:12]}…)",
                    )
        return digests

    def _pool(self, files: list[StoredFile], one: Callable[[StoredFile], str]) -> dict[str, str]:
        def copied(f: StoredFile) -> str:
            digest = one(f)
            testhooks.reached(self.point)
            return digest

        with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="savepoint-copy") as pool:
            futures = {f.path: pool.submit(copied, f) for f in files}
            return {path: fut.result() for path, fut in futures.items()}

    def _copy_local(self, f: StoredFile) -> str:
        source = self.src.local_path(f.path)
        target = self.dst.local_path(f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with open(source, "rb") as fin, open(target, "wb") as fout:
            while chunk := fin.read(CHUNK):
                digest.update(chunk)
                fout.write(chunk)
        return digest.hexdigest()

    def _copy_s3(self, f: StoredFile) -> str:
        source = {"Bucket": self.src.location.bucket, "Key": self.src.key(f.path)}
        bucket, key = self.dst.location.bucket, self.dst.key(f.path)
        if f.size < MULTIPART_THRESHOLD:
            result = self.client.copy_object(
                Bucket=bucket, Key=key, CopySource=source, ChecksumAlgorithm="SHA256", MetadataDirective="COPY"
            )
            value = result.get("CopyObjectResult", {}).get("ChecksumSHA256")
            if value and "-" not in value:
                return hex_from_b64(value)
        else:
            # Managed multipart copy (UploadPartCopy in parallel); the store's checksum
            # would be per part, so the full-object hash comes from reading the copy.
            self.client.copy(source, bucket, key, Config=self.config)
        return sha256_object(self.client, bucket, key)

    def _upload(self, files: list[StoredFile]) -> dict[str, str]:
        from boto3.s3.transfer import create_transfer_manager

        digests: dict[str, str] = {}
        futures: list[Future[Any]] = []
        with create_transfer_manager(self.client, self.config) as manager:
            # Hash the next file while the manager's threads upload the previous ones; the
            # upload reads it again from the page cache. Small files carry their SHA-256 so
            # the store refuses a corrupted transfer (BadDigest).
            for f in files:
                path = self.src.local_path(f.path)
                digest = sha256_file(path)
                digests[f.path] = digest
                extra = {"ChecksumSHA256": b64_from_hex(digest)} if f.size < MULTIPART_THRESHOLD else {}
                futures.append(
                    manager.upload(str(path), self.dst.location.bucket, self.dst.key(f.path), extra_args=extra)
                )
            for fut in futures:
                fut.result()
                testhooks.reached(self.point)
        return digests

    def _download(self, files: list[StoredFile]) -> dict[str, str]:
        from boto3.s3.transfer import create_transfer_manager

        targets: dict[str, Path] = {}
        with create_transfer_manager(self.client, self.config) as manager:
            futures = []
            for f in files:
                target = self.dst.local_path(f.path)
                target.parent.mkdir(parents=True, exist_ok=True)
                targets[f.path] = target
                futures.append(manager.download(self.src.location.bucket, self.src.key(f.path), str(target)))
            for fut in futures:
                fut.result()
                testhooks.reached(self.point)
        # Hash what landed on disk, not what was sent: that is what Spark will read.
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="savepoint-hash") as pool:
            hashed = {p: pool.submit(sha256_file, t) for p, t in targets.items()}
            return {p: fut.result() for p, fut in hashed.items()}


# ---- public API --------------------------------------------------------------------------

