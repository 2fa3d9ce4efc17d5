"""The Kafka connector from Spark 4.2.0 works with the pinned pyspark 4.3.0, through a real broker.

No spark-sql-kafka-0-10_2.13 is published for 4.3.0 (images/runtime/kafka-jars.txt); this
test is the proof docs/delivery.md points at: Spark's batch writer and reader, and a
streaming query through Spark's Kafka source and sink, with the exact jars the runtime
puts on its classpath, against the test bed's KRaft broker; the result is read back with
an independent client (librdkafka through confluent-kafka).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pyspark

from kafka_io import consume_all
from testbed import locate

JOB = Path(__file__).with_name("kafka_roundtrip_job.py")
RECORDS = 1000


def test_connector_from_spark_4_2_reads_and_writes_through_the_broker(kafka_broker, tmp_path: Path) -> None:
    source = kafka_broker.create_topic(f"roundtrip-in-{uuid.uuid4().hex[:6]}", partitions=2)
    target = kafka_broker.create_topic(f"roundtrip-out-{uuid.uuid4().hex[:6]}", partitions=2)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(STREAMJOB_JARS_DIR=str(locate.require_jars_dir()), SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run(
        [sys.executable, str(JOB), kafka_broker.bootstrap, source, target, str(tmp_path / "ckpt"), str(RECORDS)],
        capture_output=True, text=True, timeout=480, env=env,
    )
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-4000:]}"
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["spark"] == pyspark.__version__ == "4.3.0"
    assert seen["batch"] == list(range(RECORDS))
    assert seen["streamed"] == RECORDS
    values = sorted(json.loads(m.value())["n"] for m in consume_all(kafka_broker.bootstrap, target, RECORDS))
    assert values == list(range(RECORDS))
