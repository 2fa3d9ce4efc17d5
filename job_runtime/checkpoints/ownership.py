"""Checkpoint ownership: one StreamJob per checkpoint location, never two writers.

Called by job_runtime.run.runner first thing on every start (with --owner-uid, the
StreamJob's metadata.uid), before any other code or Spark touches the
checkpoint. Works on file:// and s3a:// through streamjob_contract.s3.Store.

The marker is ``<checkpoint>/_streamjob_owner.json``: namespace, name, uid and
when it was written. Absent: written (exclusively: a conditional create, so of
two jobs starting at once on an empty location one wins). Same uid: fine.
Another uid: refused, naming the owning job. Savepoints never copy it
(streamjob_contract.checkpoint leaves ``_streamjob_*`` files out) and a restore keeps
the target's own, so a savepoint restored by another job never carries the old
owner; the restoring job claims its fresh checkpoint before the restore.

The check is by uid, not name: a StreamJob deleted and created again under the
same name is another job (its own uid) and must not inherit a checkpoint that
belonged to its predecessor.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timezone

from streamjob_contract.s3 import S3Config, Store, parse_location

log = logging.getLogger("job_runtime.ownership")

OWNER_FILE = "_streamjob_owner.json"


class CheckpointOwnedError(RuntimeError):
    """The checkpoint belongs to another StreamJob; the message names it and the location."""


@dataclass(frozen=True)
class Owner:
    namespace: str
    name: str
    uid: str
    created_at: str

    def to_json(self) -> bytes:
        body = {"namespace": self.namespace, "name": self.name, "uid": self.uid, "createdAt": self.created_at}
        return (json.dumps(body, indent=2) + "\n").encode()

    @property
    def job(self) -> str:
        return f"{self.namespace}/{self.name}"


def parse_owner(data: bytes, where: str) -> Owner:
    """Parses the marker; raises CheckpointOwnedError when it is unreadable (ownership unknown)."""
    try:
        raw = json.loads(data)
        return Owner(str(raw["namespace"]), str(raw["name"]), str(raw["uid"]), str(raw.get("createdAt", "")))
    except (ValueError, KeyError, TypeError):
        raise CheckpointOwnedError(
            f"checkpoint {where}: {OWNER_FILE} is unreadable, so its owner is unknown; "
            f"if this job owns the checkpoint, delete {OWNER_FILE} and start it again"
        ) from None


def check_owner(found: Owner, *, uid: str, location: str) -> None:
    """Pure: refuses when `found` is another job than `uid`."""
    if found.uid != uid:
        raise CheckpointOwnedError(
            f"checkpoint {location} is owned by StreamJob {found.job} (uid {found.uid}); two jobs must never share "
            "a checkpoint: give this job its own spec.checkpoint.location"
        )


def claim_checkpoint(
    location: str, *, namespace: str, name: str, uid: str, s3: S3Config | None = None, now: datetime | None = None
) -> Owner:
    """Writes the marker if absent, else checks it names `uid`; returns the owner."""
    loc = parse_location(location)
    store = Store(loc, (s3 or S3Config.from_env()).client() if loc.scheme == "s3" else None)
    stamp = (now or datetime.now(timezone.utc)).isoformat(timespec="seconds").replace("+00:00", "Z")
    mine = Owner(namespace, name, uid, stamp)
    if store.create_exclusive(OWNER_FILE, mine.to_json()):
        log.info("claimed checkpoint job=%s uid=%s checkpoint=%s marker=%s", mine.job, uid, location, OWNER_FILE)
        return mine
    found = parse_owner(store.read_bytes(OWNER_FILE), location)
    check_owner(found, uid=uid, location=location)
    log.info("checked checkpoint owner job=%s uid=%s checkpoint=%s since=%s", found.job, uid, location, found.created_at)
    return found
