"""An example entrypoint job: events per user per tumbling window.

The runtime calls `build(context)` (job.entrypoint: pyjobs.windows:build);
`tumbling_counts` is the pure transform, the context does the I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

    from job_runtime.context import JobContext


def tumbling_counts(events: DataFrame, window_length: str) -> DataFrame:
    """Events and amount per user per window; the watermark on `ts` must already be set."""
    return (
        events.groupBy("user", F.window("ts", window_length))
        .agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("total"))
        .select(
            "user",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "events",
            "total",
        )
    )


def build(context: "JobContext") -> "DataStreamWriter":
    events = context.source("events")
    return context.sink(tumbling_counts(events, context.config.get("window", "10 seconds")))
