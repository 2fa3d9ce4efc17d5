"""foreachBatch sinks behind the driver epoch: a replaced driver writes no batch and commits none.

Called by job_runtime.query.pipeline.sink_writer, which wraps every foreachBatch
target it builds (the batch-directory sink; the Kafka sink checks inside its own
transaction, job_runtime.kafka.sink). The check runs in the driver's micro-batch
thread, synchronously: before the batch's output is written, and after it and
before Spark writes the batch to its commit log (foreachBatch returns first). A
driver found fenced raises job_runtime.checkpoints.epoch.FencedError: the batch
fails, Spark writes no commit, and the runtime exits FENCED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from job_runtime.kafka.sink import Fence


class FencedBatches:
    """foreachBatch target: `inner(batch, batch_id)` between two epoch checks."""

    def __init__(self, inner: Callable[["DataFrame", int], Any], fence: "Fence") -> None:
        self.inner = inner
        self.fence = fence

    def __call__(self, batch: "DataFrame", batch_id: int) -> None:
        self.fence.check(f"batch {batch_id}, before its output")
        self.inner(batch, batch_id)
        self.fence.check(f"batch {batch_id}, before its commit-log entry")
