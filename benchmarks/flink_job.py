"""The Flink side of benchmarks/flink_compare.py: one PyFlink Table API job on a local mini-cluster.

Run by flink_compare.py with the python of PyFlink's own virtualenv (benchmarks/flink_env.py),
never imported by the project. Two jobs, both Flink SQL (no Python UDF, so no Python worker):

- `windows`: Kafka (JSON {"user", "amount"}, the record timestamp as event time, watermark 10 s
  behind) -> TUMBLE 10 s per user -> Kafka (JSON, keyed by user), exactly once; the source is
  bounded at the offsets it finds at start (`scan.bounded.mode: latest-offset`), so the job ends
  when the backlog is done. Prints `BENCH {"seconds": ...}`: from `execute_sql` returning (the job
  submitted to the mini-cluster, its JVM up) to the job's end, its last checkpoint committed.
- `passthrough`: Kafka -> key, value -> Kafka, exactly once, unbounded; prints `RUNNING` once
  submitted and runs until killed.

Both: checkpoint every `--checkpoint-ms` (exactly-once mode, to a local folder), the Kafka sink's
`sink.delivery-guarantee: exactly-once` with its own transactional id prefix, parallelism
`--parallelism`, the session time zone UTC.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("windows", "passthrough"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--jar", required=True)
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--transactional-id", required=True)
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    for key, value in {
        "pipeline.jars": f"file://{args.jar}",
        "parallelism.default": str(args.parallelism),
        "execution.checkpointing.interval": f"{args.checkpoint_ms} ms",
        "execution.checkpointing.mode": "EXACTLY_ONCE",
        "execution.checkpointing.dir": f"file://{args.checkpoint_dir}",
        "table.local-time-zone": "UTC",
    }.items():
        conf.set(key, value)

    kafka = (f"'connector' = 'kafka', 'properties.bootstrap.servers' = '{args.bootstrap}', "
             "'scan.startup.mode' = 'earliest-offset', 'properties.group.id' = 'flink-bench'")
    sink = (f"'connector' = 'kafka', 'properties.bootstrap.servers' = '{args.bootstrap}', 'topic' = '{args.target}', "
            "'sink.delivery-guarantee' = 'exactly-once', "
            f"'sink.transactional-id-prefix' = '{args.transactional_id}', "
            "'properties.transaction.timeout.ms' = '600000', "
            "'key.format' = 'raw', 'key.fields' = 'user'")
    if args.mode == "windows":
        env.execute_sql(f"""
            CREATE TABLE events (
              `user` STRING, amount INT,
              ts TIMESTAMP_LTZ(3) METADATA FROM 'timestamp',
              WATERMARK FOR ts AS ts - INTERVAL '10' SECOND
            ) WITH ({kafka}, 'topic' = '{args.source}', 'scan.bounded.mode' = 'latest-offset',
                    'value.format' = 'json')""")
        env.execute_sql(f"""
            CREATE TABLE windows (
              `user` STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), events BIGINT, total INT
            ) WITH ({sink}, 'value.format' = 'json', 'value.fields-include' = 'ALL')""")
        result = env.execute_sql("""
            INSERT INTO windows
            SELECT `user`, window_start, window_end, COUNT(*) AS events, SUM(amount) AS total
            FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND))
            GROUP BY `user`, window_start, window_end""")
        started = time.monotonic()
        result.wait()
        print("BENCH " + json.dumps({"seconds": time.monotonic() - started}), flush=True)
    else:
        env.execute_sql(f"""
            CREATE TABLE pings (`user` STRING, sent STRING)
            WITH ({kafka}, 'topic' = '{args.source}', 'key.format' = 'raw', 'key.fields' = 'user',
                  'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY')""")
        env.execute_sql(f"""
            CREATE TABLE pongs (`user` STRING, sent STRING)
            WITH ({sink}, 'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY')""")
        result = env.execute_sql("INSERT INTO pongs SELECT `user`, sent FROM pings")
        print("RUNNING", flush=True)
        result.wait()


if __name__ == "__main__":
    main()
