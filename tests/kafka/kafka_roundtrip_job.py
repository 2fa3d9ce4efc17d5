"""Spark's own Kafka connector against the test bed's broker, run as a child process by
tests/kafka/test_kafka_connector.py with the jars the runtime uses ($STREAMJOB_JARS_DIR).

argv: bootstrap, input topic, output topic, checkpoint dir, records. Writes `records`
JSON rows to the input topic (batch writer), reads them back (batch reader), then a
streaming query (availableNow) copies the input topic to the output topic through
Spark's Kafka sink. Prints one JSON line with what it saw.
"""

import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

bootstrap, source, target, checkpoint, records = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
jars = sorted(str(p) for p in Path(os.environ["STREAMJOB_JARS_DIR"]).glob("*.jar"))
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.jars", ",".join(jars))
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
rows = spark.range(records).selectExpr("CAST(id AS STRING) AS key", "to_json(named_struct('n', id)) AS value")
rows.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", source).save()
back = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source).load()
batch_ids = sorted(json.loads(r.v)["n"] for r in back.selectExpr("CAST(value AS STRING) AS v").collect())
query = (
    spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
    .option("startingOffsets", "earliest").load()
    .selectExpr("key", "value")
    .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
    .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
)
query.awaitTermination(300)
progress = query.lastProgress or {}
print(json.dumps({"spark": spark.version, "batch": batch_ids, "streamed": sum(p["numInputRows"] for p in query.recentProgress)}))
spark.stop()
