"""One S3 client per driver process: the runtime's S3Config builds its boto3 client once and shares it.

Built by job_runtime.main for the Runner; every S3 call of the runtime goes through ``client()`` of the
config it was given (streamjob_contract.checkpoint, .savepoints, job_runtime.checkpoints, the savepoint
writer and restore), which on a plain S3Config builds a new client each time. A start asks for one about
ten times (owner, epoch, recovery, restore check, manifest, restore, pin, commits), each a new client and a
new connection; a warm standby builds the shared one before its release (job_runtime.run.warmup), so the
restore after the release starts with botocore's models loaded (the first client of a process: about
0.25 s). boto3's clients are thread-safe; the pool fits ``max_concurrency`` parallel copies, as before.
The operator keeps the plain S3Config: its configs come and go with jobs and Secrets.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from streamjob_contract.s3 import S3Config


@dataclass(frozen=True)
class SharedS3Config(S3Config):
    """An S3Config whose ``client()`` is built on the first call and returned to every later one."""

    _clients: list[Any] = field(default_factory=list, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def client(self) -> Any:
        with self._lock:  # two first calls at once (status endpoint, main thread) build one client
            if not self._clients:
                self._clients.append(super().client())
            return self._clients[0]
