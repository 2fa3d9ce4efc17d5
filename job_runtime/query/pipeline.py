"""The declarative pipeline: sources, event time, SQL transforms, a sink.

Called by job_runtime.query.start (for `job.pipeline`) and by JobContext (for the
sources and sink an entrypoint job declares). The I/O sits at the edges
(`open_source`, `sink_writer`, `BatchDirectoryWriter`); the middle
(`with_event_time`, `apply_transforms`) takes DataFrames and returns
DataFrames. Spark errors in a definition (bad SQL, unknown column) are raised
as JobDefinitionError naming the field, so the runtime exits INVALID_JOB.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamjob_contract.jobdef import (
    Delivery, EventTime, JobDefinition, JobDefinitionError, KafkaProducers, Pipeline, Sink, SinkFormat, SinkKind, Source,
    SourceKind, Transform, declared_sink, declared_sources,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from job_runtime.kafka.budget import PlanNode, SourceLimit
    from job_runtime.kafka.sink import SinkIdentity
    from pyspark.sql.streaming.readwriter import DataStreamWriter

log = logging.getLogger("job_runtime.pipeline")

KAFKA_CONNECTOR = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
# Records one poll of a Kafka source's consumer may return. Kafka's default (500) makes Spark's source poll
# again every 500 records; what one poll returns is bounded anyway by what the consumer fetched
# (max.partition.fetch.bytes, 1 MiB a partition). 100,000 read the source alone 1.5x faster than 500, the
# windows example 1.3x (docs/benchmarks/windows-stages.md, flink.md); 10,000 the windows example as fast as
# 100,000, and the 5 M pass-through backlog faster than either, in both delivery modes (2026-12-07: Spark's
# writer 15.8 s against 18.3 s and 20.3 s, the driver's exactly-once 18.5 s against 25.1 s and 24.2 s;
# docs/benchmarks/kafka-backlog-5m-default.md). A source's own option wins.
KAFKA_READ_DEFAULTS = {"kafka.max.poll.records": "10000"}


def kafka_read_options(options: Mapping[str, str]) -> dict[str, str]:
    """A Kafka source's options with KAFKA_READ_DEFAULTS for the keys it leaves unset. Pure."""
    return {**KAFKA_READ_DEFAULTS, **options}


def _analysis_errors() -> tuple[type[BaseException], ...]:
    from pyspark.errors import AnalysisException, IllegalArgumentException, ParseException

    return (AnalysisException, ParseException, IllegalArgumentException)


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# ---- edges: reading ----------------------------------------------------------------------


def open_source(spark: "SparkSession", source: Source, where: str, limit: "SourceLimit | None" = None) -> "DataFrame":
    """A streaming DataFrame for one declared source; `where` is its field path for errors.
    `limit`: what a Kafka source may plan a batch (exactly_once_source_limit)."""
    reader = spark.readStream
    if source.kind == SourceKind.rate:
        return reader.format("rate").options(**source.options).load()
    if source.kind == SourceKind.kafka:
        from job_runtime.query.session import class_available

        if not class_available(spark, KAFKA_CONNECTOR):
            raise JobDefinitionError(
                f"{where}.kind: kafka source {source.name!r} needs the Kafka connector "
                "(org.apache.spark:spark-sql-kafka-0-10) on the classpath; it is not there: "
                "add it to the image or to $STREAMJOB_JARS_DIR"
            )
        options = kafka_read_options(source.options)
        for key in KAFKA_READ_DEFAULTS.keys() - source.options.keys():
            log.info("kafka source source=%s %s=%s own=unset reason=the runtime's read default", source.name, key,
                     options[key])
        if source.sasl is not None:
            from job_runtime.kafka import auth as kafka_auth

            role = f"source.{source.name}"
            kafka_auth.check(options.get("kafka.bootstrap.servers", ""), source.sasl, role, where)
            options.update(kafka_auth.spark_options(source.sasl, role, where))  # in memory only, never logged
        if limit is not None:
            from job_runtime.kafka import budget

            options, lowered = budget.limited_options(options, limit)
            for key, own in lowered.items():
                log.info("capped kafka source source=%s %s=%s own=%s reason=the exactly-once Kafka sink's transaction "
                         "budget (docs/delivery.md)", source.name, key, options[key], own)
        return reader.format("kafka").options(**options).load()
    assert source.format is not None and source.path is not None and source.schema_ is not None  # the model's rule
    try:
        return reader.format(source.format.value).schema(source.schema_).options(**source.options).load(source.path)
    except _analysis_errors() as err:
        raise JobDefinitionError(f"{where}.schema: {_first_line(err)}") from None


# ---- pure: DataFrame in, DataFrame out ----------------------------------------------------


def with_event_time(df: "DataFrame", event_time: EventTime | None, where: str = "eventTime") -> "DataFrame":
    """`df` with the event-time watermark declared for it (unchanged when none is)."""
    if event_time is None:
        return df
    if event_time.column not in df.columns:
        raise JobDefinitionError(
            f"{where}.column: no column {event_time.column!r} (columns: {', '.join(df.columns)})"
        )
    return df.withWatermark(event_time.column, event_time.watermark_delay)


def apply_transforms(
    spark: "SparkSession", inputs: Mapping[str, "DataFrame"], transforms: Sequence[Transform], where: str
) -> dict[str, "DataFrame"]:
    """Every named result: the inputs plus each transform's SELECT, run over temp views of the earlier ones."""
    frames = dict(inputs)
    for name, df in inputs.items():
        df.createOrReplaceTempView(name)
    for i, transform in enumerate(transforms):
        try:
            result = spark.sql(transform.sql)
        except _analysis_errors() as err:
            raise JobDefinitionError(f"{where}.transforms[{i}].sql ({transform.name}): {_first_line(err)}") from None
        result.createOrReplaceTempView(transform.name)
        frames[transform.name] = result
    return frames


def sink_input(pipeline: Pipeline) -> str:
    """The name the sink writes: sink.input, else the last transform, else the first source."""
    if pipeline.sink.input:
        return pipeline.sink.input
    if pipeline.transforms:
        return pipeline.transforms[-1].name
    return pipeline.sources[0].name


# ---- edges: writing ----------------------------------------------------------------------


class BatchDirectoryWriter:
    """foreachBatch target: batch N goes to `path/batch_id=N`, overwritten when N is replayed.

    A micro-batch re-run after a failure has the same id and the same input
    (the offsets are in the write-ahead log), so overwriting its own directory
    makes the sink idempotent by batch id.
    """

    def __init__(self, path: str, file_format: SinkFormat, options: Mapping[str, str]) -> None:
        self.path = path.rstrip("/")
        self.file_format = file_format
        self.options = dict(options)

    def target(self, batch_id: int) -> str:
        return f"{self.path}/batch_id={batch_id}"

    def __call__(self, batch: "DataFrame", batch_id: int) -> None:
        batch.write.mode("overwrite").format(self.file_format.value).options(**self.options).save(self.target(batch_id))
        log.debug("wrote batch batchId=%s path=%s", batch_id, self.target(batch_id))


def kafka_endpoints(job: JobDefinition) -> list[str]:
    """The job's Kafka sources and sink, each with its brokers and topic, for error messages."""
    sink = declared_sink(job)
    found = []
    for source in declared_sources(job):
        if source.kind == SourceKind.kafka:
            opts = source.options
            topic = opts.get("subscribe") or opts.get("subscribePattern") or opts.get("assign")
            found.append(f"kafka source {source.name!r}: brokers {opts.get('kafka.bootstrap.servers')} topic {topic}")
    if sink is not None and sink.kafka is not None:
        found.append(f"kafka sink: brokers {sink.kafka.bootstrap_servers} topic {sink.kafka.topic}")
    return found


def kafka_context(job: JobDefinition, error: str) -> str:
    """" (kafka source ...; kafka sink ...)" when a query failure is Kafka's, else ""."""
    endpoints = kafka_endpoints(job)
    if not endpoints or "kafka" not in error.lower():
        return ""
    return f" ({'; '.join(endpoints)})"


def exactly_once_source_limit(
    sink: Sink | None, sources: Sequence[Source], identity: "SinkIdentity | None"
) -> "SourceLimit | None":
    """What each Kafka source may plan a batch when the sink is the exactly-once Kafka sink (its batch
    cap shared among the Kafka sources, and with the driver producing, the records of one Spark
    partition), else None: other sinks take what the user set."""
    if sink is None or sink.kafka is None or sink.kafka.delivery != Delivery.exactly_once:
        return None
    from job_runtime.kafka import budget
    from job_runtime.kafka.sink import batch_cap

    store = identity.fence.store if identity is not None and identity.fence is not None else None
    kafka_sources = sum(1 for s in sources if s.kind == SourceKind.kafka)
    executors = sink.kafka.producers == KafkaProducers.executors
    return budget.source_limit(batch_cap(sink.kafka, store), kafka_sources, executors)


def sink_frame(spark: "SparkSession", pipeline: Pipeline, where: str, cap: "SourceLimit | None") -> "DataFrame":
    """The frame the sink writes: each source opened under `cap`, its event time, the transforms."""
    inputs = {}
    for i, source in enumerate(pipeline.sources):
        src_where = f"{where}.sources[{i}]"
        opened = open_source(spark, source, src_where, cap)
        inputs[source.name] = with_event_time(opened, source.event_time, f"{src_where}.eventTime")
    return apply_transforms(spark, inputs, pipeline.transforms, where)[sink_input(pipeline)]


def split_where_it_serves(spark: "SparkSession", pipeline: Pipeline, where: str, cap: "SourceLimit") -> "SourceLimit":
    """`cap`, without its partition split when every source reaches the sink through a shuffle
    (job_runtime.kafka.budget.split_serves), judged on the pipeline's analyzed plan."""
    from py4j.protocol import Py4JError

    from job_runtime.kafka import budget

    try:
        plan = plan_nodes(sink_frame(spark, pipeline, where, None)._jdf.queryExecution().analyzed())
    except Py4JError as err:  # the split is the safe side: keep it
        log.warning("kept the kafka source split reason=the plan could not be read error=%s", _first_line(err))
        return cap
    if budget.split_serves(plan):
        return cap
    log.info("kafka sources unsplit reason=every source reaches the sink through an aggregation or a "
             "deduplication: the sink receives the shuffle's partitions, which a split would not bound")
    return budget.unsplit(cap)


def plan_nodes(node: Any) -> "PlanNode":
    """A JVM LogicalPlan (py4j) as budget.PlanNode names."""
    from job_runtime.kafka.budget import PlanNode

    children = node.children()
    return PlanNode(str(node.nodeName()), tuple(plan_nodes(children.apply(i)) for i in range(children.size())))


def sink_writer(df: "DataFrame", sink: Sink, identity: "SinkIdentity | None" = None) -> "DataStreamWriter":
    """The DataStreamWriter for a declared sink, without checkpoint/trigger (the runtime adds those).

    `identity` (job and checkpoint) names a kafka sink's transaction (job_runtime.kafka.sink)."""
    if sink.kind == SinkKind.kafka:
        from job_runtime.kafka.writers import kafka_writer

        assert sink.kafka is not None  # the model's rule
        if identity is None:
            raise JobDefinitionError("sink.kafka: the Kafka sink needs the job's namespace, name and checkpoint")
        if sink.kafka.sasl is not None:
            from job_runtime.kafka import auth as kafka_auth

            kafka_auth.check(sink.kafka.bootstrap_servers, sink.kafka.sasl, "sink", "sink.kafka")
        try:
            return kafka_writer(df, sink.kafka, sink.output_mode.value, identity)
        except ValueError as err:
            raise JobDefinitionError(str(err)) from None
    writer = df.writeStream.outputMode(sink.output_mode.value)
    if sink.kind == SinkKind.console:
        return writer.format("console").option("truncate", "false").options(**sink.options)
    assert sink.path is not None and sink.format is not None  # the model's rule
    if sink.kind == SinkKind.foreach_batch:
        target = BatchDirectoryWriter(sink.path, sink.format, sink.options)
        if identity is not None and identity.fence is not None:
            from job_runtime.query.fenced import FencedBatches

            return writer.foreachBatch(FencedBatches(target, identity.fence))
        return writer.foreachBatch(target)
    return writer.format(sink.format.value).option("path", sink.path).options(**sink.options)


def build_pipeline(
    spark: "SparkSession", pipeline: Pipeline, where: str = "job.pipeline", identity: "SinkIdentity | None" = None
) -> "DataStreamWriter":
    """Sources -> event time -> transforms -> sink writer, for one start of the query."""
    cap = exactly_once_source_limit(pipeline.sink, pipeline.sources, identity)
    if cap is not None and cap.partition_records is not None:
        cap = split_where_it_serves(spark, pipeline, where, cap)
    result = sink_frame(spark, pipeline, where, cap)
    try:
        return sink_writer(result, pipeline.sink, identity)
    except _analysis_errors() as err:
        raise JobDefinitionError(f"{where}.sink: {_first_line(err)}") from None
