"""Stop for a savepoint between micro-batches: the batch in flight finishes, no new one starts.

Called by job_runtime.run.runner for a stop-with-savepoint. Spark has no public
"stop after this batch": ``query.stop()`` interrupts the stream thread wherever
it is, and a batch it interrupts stays planned (``offsets/N`` without
``commits/N``). A savepoint holding a planned batch restores fine (the batch
re-runs), but Spark repartitions state only after a committed last batch, so a
change of ``statePartitions`` through such a savepoint is refused. Under steady
input the stream thread starts the next batch right after the last one, so
waiting for an idle moment and then calling stop() rarely finds one.

What is done instead, within a deadline (``drain_seconds``: STOP_DRAIN_SECONDS, or a
quarter of savepoint.timeoutSeconds when shorter):

1. ``end_after_batch``: the query's state is set to TERMINATED (Spark's own
   StreamExecution.state, through py4j; what ``stop()`` sets first, without the
   interrupt). The stream thread checks it before it plans a batch, so it ends
   after the batch in flight, the batch committed. A batch still being planned
   when the flag is set interrupts itself (Spark's check after query planning):
   step 3 finishes it.
2. ``wait_ended``: wait until the thread ended. When it is waiting for its next
   trigger (long intervals), stop() ends the wait at once: no batch can start
   with the flag set.
3. If a batch is still planned, uncommitted (the deadline, a batch caught while
   being planned), the caller runs the query once more with a one-batch trigger
   (Trigger.Once runs exactly the planned batch from the offset log, then ends),
   within what is left of the deadline.

When the deadline passes, the query is stopped as before: nothing is lost, the
savepoint holds the planned batch and a restore re-runs it; only a change of
statePartitions through that savepoint is refused (docs/operator.md).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from streamjob_contract import checkpoint
from job_runtime.checkpoints.pinning import latest_planned_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from streamjob_contract.s3 import S3Config

log = logging.getLogger("job_runtime.drain")

STOP_DRAIN_SECONDS = 120.0  # for the batch in flight (and a planned one) before the stop interrupts it
DRAIN_SHARE_OF_TIMEOUT = 0.25  # of savepoint.timeoutSeconds: the rest is for writing the savepoint
# the thread was seen waiting for its next trigger this long: stop() ends the wait. Short is safe: the thread
# reads the flag before it plans, and marks a trigger active right after that read, so three polls seeing it
# inactive after the flag was set cannot overlap a batch (a stop on a 1 s trigger waited up to 1 s here before)
IDLE_SECONDS = 0.2
POLL_SECONDS = 0.1


def drain_seconds(savepoint_timeout_seconds: float | None) -> float:
    """How long the batch in flight may take to finish: STOP_DRAIN_SECONDS, or a quarter of the
    job's savepoint timeout when that is shorter, so the savepoint itself still fits in it."""
    if savepoint_timeout_seconds is None:
        return STOP_DRAIN_SECONDS
    return min(STOP_DRAIN_SECONDS, savepoint_timeout_seconds * DRAIN_SHARE_OF_TIMEOUT)


def end_after_batch(query: "StreamingQuery", spark: "SparkSession") -> bool:
    """Ask the stream thread to end after the batch in flight; False when this Spark cannot be asked."""
    try:
        execution = query._jsq.streamingQuery()  # StreamingQueryWrapper -> MicroBatchExecution
        package = spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.runtime  # type: ignore[union-attr]
        terminated = getattr(getattr(package, "TERMINATED$"), "MODULE$")  # Spark's case object TERMINATED
        execution.state().set(terminated)
        return True
    except Exception as err:  # another Spark version: fall back to stop()
        log.warning("cannot ask the query to end after its batch reason=%s; the stop interrupts the batch in flight", err)
        return False


def wait_ended(query: "StreamingQuery", deadline: float) -> str:
    """Wait for the stream thread to end: "ended", "idle" (waiting for a trigger; stopped now) or "deadline"."""
    idle_since: float | None = None
    while time.monotonic() < deadline:
        if not _thread_alive(query):
            return "ended"
        active = _trigger_active(query)
        if active is False:
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= IDLE_SECONDS:
                return "idle"
        else:
            idle_since = None
        time.sleep(POLL_SECONDS)
    return "ended" if not _thread_alive(query) else "deadline"


def wait_finished(query: "StreamingQuery", deadline: float) -> bool:
    """Wait for a bounded (Trigger.Once) query to end; False at the deadline."""
    while time.monotonic() < deadline:
        if not _thread_alive(query):
            return True
        time.sleep(POLL_SECONDS)
    return not _thread_alive(query)


def planned_batch(location: str, s3: "S3Config") -> int | None:
    """The batch planned and not committed in the checkpoint (``offsets/N`` without ``commits/N``), or None."""
    planned = latest_planned_batch(location, s3)
    committed = checkpoint.latest_completed_batch(location, s3=s3)
    if planned is None or (committed is not None and committed >= planned):
        return None
    return planned


def _thread_alive(query: "StreamingQuery") -> bool:
    try:
        return bool(query._jsq.streamingQuery().queryExecutionThread().isAlive())
    except Exception:
        return bool(query.isActive)


def _trigger_active(query: "StreamingQuery") -> Any:
    try:
        return query.status.get("isTriggerActive")
    except Exception:
        return None
