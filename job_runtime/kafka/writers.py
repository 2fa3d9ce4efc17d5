"""The writer for a `kind: kafka` sink: Spark's at-least-once writer, or the exactly-once sink with the
driver (job_runtime.kafka.sink) or the executors (job_runtime.kafka.sink_tasks) producing.

Called by job_runtime.query.pipeline.sink_writer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from job_runtime.kafka import auth as kafka_auth
from job_runtime.kafka.sink import ExactlyOnceKafkaWriter, SinkIdentity, records
from job_runtime.kafka.sink_tasks import ExecutorsKafkaWriter
from streamjob_contract.jobdef import Delivery, KafkaProducers, KafkaSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def kafka_writer(df: "DataFrame", kafka: KafkaSink, output_mode: str, identity: SinkIdentity) -> "DataStreamWriter":
    """The DataStreamWriter for a kafka sink (checkpoint and trigger added by the runtime)."""
    if kafka.delivery == Delivery.at_least_once:
        from pyspark.sql import functions as F

        shaped = records(df, kafka)
        if kafka.headers_column:  # Spark's writer takes headers as array<struct<key string, value binary>>
            shaped = shaped.withColumn(
                "headers", F.expr("transform(map_entries(headers), e -> named_struct('key', e.key, 'value', cast(e.value as binary)))")
            )
        # Spark's writer sends every row to its "topic" option when it is set, whatever the topic column says:
        # with a topicColumn the column (already the sink's topic where the row names none) must decide
        topic = {} if kafka.topic_column else {"topic": kafka.topic}
        return (
            shaped.writeStream.outputMode(output_mode).format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers).options(**topic)
            .options(**kafka_auth.spark_options(kafka.sasl, "sink", "sink.kafka"))
        )
    if kafka.producers == KafkaProducers.executors:
        writer: ExactlyOnceKafkaWriter = ExecutorsKafkaWriter(kafka, identity)
    else:
        writer = ExactlyOnceKafkaWriter(kafka, identity)
    writer.start(df.sparkSession)  # before the query plans: the previous driver's producer is fenced first
    return df.writeStream.outputMode(output_mode).foreachBatch(writer)
