"""What a Python entrypoint job receives: the JobContext.

Built by job_runtime.query.start for each start of the query and handed to the user's
`package.module:function`. The function returns a DataStreamWriter (the
runtime sets checkpoint location, trigger and query name, then starts it) or
an already started StreamingQuery (then it must have used `context.start` or
`context.checkpoint_location` and `context.trigger` itself).

    def build(context: JobContext) -> DataStreamWriter:
        events = context.source("events")            # declared in job.sources, watermark applied
        counts = tumbling_counts(events, context.config["window"])   # a pure transform
        return context.sink(counts)                  # declared in job.sink
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streamjob_contract.jobdef import Sink, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from job_runtime.checkpoints.epoch import Fence
    from job_runtime.kafka.sink import SinkIdentity


class JobContextError(LookupError):
    """A name the job asked for is not declared; the message names the field."""


@dataclass(frozen=True)
class JobContext:
    spark: "SparkSession"
    config: Mapping[str, str]
    job_name: str
    job_namespace: str
    checkpoint_location: str
    trigger_interval: str
    available_now: bool
    state_partitions: int
    query_name: str
    sources: Mapping[str, Source] = field(default_factory=dict)
    declared_sink: Sink | None = None
    once: bool = False  # the runtime finishes a planned batch alone (job_runtime.query.drain); not for jobs to set
    fence: "Fence | None" = None  # this driver's epoch (job_runtime.checkpoints.epoch); the sinks check it
    restored: bool = False  # this start restored an explicit --restore-from (a replay may publish again)

    def source(self, name: str) -> "DataFrame":
        """The declared source `name` as a streaming DataFrame (event-time watermark applied)."""
        from job_runtime.query import pipeline

        if name not in self.sources:
            declared = ", ".join(sorted(self.sources)) or "none"
            raise JobContextError(f"job.sources: no source named {name!r} (declared: {declared})")
        src = self.sources[name]
        where = f"job.sources[{list(self.sources).index(name)}]"
        cap = pipeline.exactly_once_source_limit(self.declared_sink, list(self.sources.values()), self.sink_identity())
        return pipeline.with_event_time(pipeline.open_source(self.spark, src, where, cap), src.event_time)

    def sink(self, df: "DataFrame") -> "DataStreamWriter":
        """A writer for the declared sink; the runtime adds checkpoint, trigger and query name."""
        from job_runtime.query import pipeline

        if self.declared_sink is None:
            raise JobContextError("job.sink: no sink declared; declare one or return your own DataStreamWriter")
        return pipeline.sink_writer(df, self.declared_sink, self.sink_identity())

    def sink_identity(self) -> "SinkIdentity":
        """The job and checkpoint a kafka sink's transactions belong to, and this driver's epoch."""
        from job_runtime.kafka.sink import SinkIdentity

        return SinkIdentity(self.job_namespace, self.job_name, self.checkpoint_location, self.fence, self.restored,
                            replan=not self.once)

    def configure(self, writer: "DataStreamWriter") -> "DataStreamWriter":
        """Apply the runtime's checkpoint location, trigger and query name to `writer`."""
        writer = writer.option("checkpointLocation", self.checkpoint_location).queryName(self.query_name)
        if self.once:
            return writer.trigger(once=True)
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.trigger_interval)

    def start(self, writer: "DataStreamWriter") -> "StreamingQuery":
        """Configure and start `writer` (for jobs that want the StreamingQuery themselves)."""
        return self.configure(writer).start()
