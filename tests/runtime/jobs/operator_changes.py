"""Entrypoint jobs whose stateful operators differ, for tests/runtime/test_runtime_kill_points.py.

Spark numbers stateful operators from the sink towards the sources:
- dedup_then_count: 0 the window aggregation, 1 the deduplication;
- count: 0 the window aggregation (the deduplication removed: its state is not restored);
- dedup_only: 0 the deduplication (renumbered: Spark cannot map it to state/1).
The deduplication key leaves out the event-time column, so it drops no late rows
and keeps every row of an input without duplicates: all three count the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pyjobs.windows import tumbling_counts

if TYPE_CHECKING:
    from pyspark.sql.streaming import DataStreamWriter

    from job_runtime.context import JobContext


def _deduplicated(events: DataFrame) -> DataFrame:
    key = F.concat_ws("|", "user", F.col("ts").cast("string"), F.col("amount").cast("string"))
    return events.withColumn("event_key", key).dropDuplicates(["event_key"]).drop("event_key")


def dedup_then_count(context: "JobContext") -> "DataStreamWriter":
    return context.sink(tumbling_counts(_deduplicated(context.source("events")), "10 seconds"))


def count(context: "JobContext") -> "DataStreamWriter":
    return context.sink(tumbling_counts(context.source("events"), "10 seconds"))


def dedup_only(context: "JobContext") -> "DataStreamWriter":
    return context.sink(_deduplicated(context.source("events")))
