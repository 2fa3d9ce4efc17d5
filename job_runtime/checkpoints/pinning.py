"""The state-partition pin: refuse to run a checkpoint with a partition count other than its own.

Called by job_runtime.run.runner before Spark starts. Spark writes
`spark.sql.shuffle.partitions` into every `offsets/N` and, on a restart,
silently uses that pinned value whatever the session says; running with a
different `--state-partitions` would therefore look like it worked while the
spec says otherwise. We refuse instead (exit RESTORE_REFUSED): changing the
count takes a savepoint and an offline state repartition.
"""

from __future__ import annotations

import logging

from streamjob_contract.checkpoint import batch_id_of, is_hidden, open_store, read_offset_log
from streamjob_contract.s3 import S3Config

log = logging.getLogger("job_runtime.pinning")


class StateIncompatibleError(RuntimeError):
    """The checkpoint's pinned state cannot serve this run; the message says what differs and where."""


def latest_planned_batch(location: str, s3: S3Config) -> int | None:
    """The highest N with an `offsets/N` file (planned, maybe not committed), or None."""
    store = open_store(location, s3)
    batches = [
        b
        for f in store.list("offsets")
        if not is_hidden(f.path) and (b := batch_id_of(f.path.rsplit("/", 1)[-1])) is not None
        and "." not in f.path.rsplit("/", 1)[-1]
    ]
    return max(batches) if batches else None


def check_state_partitions(location: str, requested: int, s3: S3Config) -> int | None:
    """The pinned count (None for a fresh checkpoint); raises StateIncompatibleError on a mismatch."""
    batch = latest_planned_batch(location, s3)
    if batch is None:
        return None
    entry = read_offset_log(location, batch, s3=s3)
    pinned = entry.state_partitions
    if pinned is not None and pinned != requested:
        raise StateIncompatibleError(
            f"--state-partitions {requested}: the checkpoint {location} pins spark.sql.shuffle.partitions={pinned} "
            f"(offsets/{batch}); state partitions are fixed for the life of the state: run with {pinned}, or take a "
            "savepoint and restore it with an offline state repartition"
        )
    log.info("checked state partitions checkpoint=%s pinned=%s batch=%s", location, pinned, batch)
    return pinned
