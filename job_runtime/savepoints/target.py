"""Where a savepoint may be written: the confinement rule of the control endpoint.

Called by ``job_runtime.run.runner`` when ``POST /savepoints`` names a path (the
operator's upgrade, manual, periodic, suspend and delete savepoints all name one
below ``spec.savepoint.location``, see ``streamjob_operator.reconcile.names``).
Pure: parsing and comparing locations, no I/O.

The rule: a requested target lies strictly below the job's savepoint location
(same store, same bucket; ``s3://`` and ``s3a://`` are the same store), has no
``..`` segment, and neither contains nor lies inside the job's checkpoint
location. Anything else is refused with the path named, before a byte is written.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from streamjob_contract.s3 import Location, LocationError, parse_location


class SavepointPathError(ValueError):
    """A requested savepoint target outside what this job may write; the message names it."""


def _inside(inner: Location, outer: Location, *, strictly: bool) -> bool:
    """True when ``inner`` is ``outer`` (unless ``strictly``) or lies below it, in the same store."""
    if (inner.scheme, inner.bucket) != (outer.scheme, outer.bucket):
        return False
    a, b = inner.path.rstrip("/"), outer.path.rstrip("/")
    if a == b:
        return not strictly
    return b == "" or a.startswith(b + "/")


def confine(path: str, savepoint_location: str | None, checkpoint_location: str) -> str:
    """Returns ``path`` when the job may write a savepoint there; raises ``SavepointPathError``."""
    if not savepoint_location:
        raise SavepointPathError(
            f"body.path {path!r}: refused: the runtime has no --savepoint-location, and savepoints are written only below it"
        )
    raw = urlsplit(path).path if "://" in path else path
    if ".." in raw.split("/"):
        raise SavepointPathError(f"body.path {path!r}: '..' path segments are not allowed")
    try:
        target = parse_location(path)
    except LocationError as err:
        raise SavepointPathError(f"body.path: {err}") from None
    base = parse_location(savepoint_location)
    if not _inside(target, base, strictly=True):
        raise SavepointPathError(
            f"body.path {path!r}: outside the job's savepoint location {savepoint_location}: "
            "savepoints are written only below it"
        )
    checkpoint = parse_location(checkpoint_location)
    if _inside(target, checkpoint, strictly=False) or _inside(checkpoint, target, strictly=False):
        raise SavepointPathError(
            f"body.path {path!r}: overlaps the job's checkpoint location {checkpoint_location}: refused"
        )
    return path
