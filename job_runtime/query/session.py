"""Engine set-up: the Spark configuration every StreamJob runs with, and the session built from it.

Called by job_runtime.run.runner before the query is built. `engine_conf` is pure
(settings in, confs out) so tests and the benchmark can read what the runtime
sets; `build_session` is the I/O edge that starts (or joins) the JVM.

What is set and why:
- RocksDB state store with changelog checkpointing: state lives off-heap and
  each batch uploads only a changelog (Flink's incremental checkpoints).
- spark.sql.shuffle.partitions = state partitions. Spark pins it into the
  checkpoint's offset log on the first batch and ignores the conf afterwards;
  job_runtime.checkpoints.pinning refuses a run whose request differs from the pin.
- A --conf that sets a key the runtime owns (streamjob_contract.sparkconf) is
  refused, whatever its value; the CRD refuses the same keys at apply time.
- s3a: endpoint, region, path style; credentials only from the environment
  (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY), never written into a conf.
- spark-hadoop-cloud's abortable-stream checkpoint file manager for s3a://
  checkpoints when that class is on the classpath (no rename on S3), unless a
  --conf chose the checkpoint file manager (the kill tests' pausing one).
- Extra jars from $STREAMJOB_JARS_DIR on the driver and executor classpath.
- A local master (`executor.instances: 0`, the benchmarks, the runtime tests) gets
  Spark's cluster default of 4 attempts per task (`local[N]` -> `local[N,4]`; plain
  `local[N]` gives one, so any lost task fails the batch and restarts the driver)
  and takes task results directly up to 128 MiB (`spark.task.maxDirectResultSize`):
  in one JVM a result needs no copy into the block manager and no fetch over the
  loopback. (A driver short of heap then fails with its OutOfMemoryError rather than
  with `TaskResultLost`. The driver mode's large backlogs did both; the cause was
  `toLocalIterator`'s leak, fixed in job_runtime.kafka.driver_rows, not these settings.)
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from job_runtime.settings import RuntimeSettings, SettingsError
from streamjob_contract.sparkconf import owned

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("job_runtime.session")

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOCAL_TASK_ATTEMPTS = 4  # spark.task.maxFailures' default, which a cluster master gets
LOCAL_DIRECT_RESULT = "128m"  # spark.rpc.message.maxSize's default, the most Spark takes directly
_LOCAL_MASTER = re.compile(r"local(?:\[(\*|[1-9][0-9]*)\])?")
ABORTABLE_CHECKPOINT_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
ENV_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
JARS_DIR_ENV = "STREAMJOB_JARS_DIR"
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"

SECRET_MARKERS = ("secret", "password", "token", "access.key", "credential")


def extra_jars(jars_dir: str | None) -> list[Path]:
    """The jars in $STREAMJOB_JARS_DIR (sorted), or none when it is unset or missing."""
    if not jars_dir:
        return []
    path = Path(jars_dir)
    return sorted(path.glob("*.jar")) if path.is_dir() else []


def engine_conf(settings: RuntimeSettings, jars: list[Path] | None = None) -> dict[str, str]:
    """Every Spark conf the runtime sets, user --conf last. Pure; raises SettingsError."""
    conf: dict[str, str] = {
        "spark.app.name": f"streamjob-{settings.namespace}-{settings.name}",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(settings.state_partitions),
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        # The console progress bar garbles driver logs.
        "spark.ui.showConsoleProgress": "false",
        # Python-side stop() must wait for the batch to abort cleanly, not forever.
        "spark.sql.streaming.stopTimeout": "120000",
    }
    if settings.master:
        master = with_task_attempts(settings.master)
        conf["spark.master"] = master
        if master.startswith("local["):
            conf["spark.task.maxDirectResultSize"] = LOCAL_DIRECT_RESULT
    s3 = settings.s3
    if s3.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = s3.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(s3.endpoint.startswith("https://")).lower()
    conf["spark.hadoop.fs.s3a.endpoint.region"] = s3.region
    conf["spark.hadoop.fs.s3a.path.style.access"] = str(s3.path_style).lower()
    conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = ENV_CREDENTIALS_PROVIDER
    if jars:
        # The classpath rather than spark.jars alone: Hadoop loads FileSystem
        # implementations (S3AFileSystem) through the application class loader.
        classpath = os.pathsep.join(str(j) for j in jars)
        conf["spark.driver.extraClassPath"] = classpath
        conf["spark.executor.extraClassPath"] = classpath
        conf["spark.jars"] = ",".join(str(j) for j in jars)
    for key, value in settings.spark_conf:
        refused = owned(key)
        if refused is not None:
            # the CRD refuses the same keys with the same words (api.spec); a
            # StreamJob gets here only through a CRD installed before that rule
            raise SettingsError(f"--conf {key}: {refused.rule}")
        if key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath") and key in conf:
            value = f"{conf[key]}{os.pathsep}{value}"
        conf[key] = value
    return conf


def with_task_attempts(master: str) -> str:
    """`local`, `local[N]` or `local[*]` with Spark's cluster default of 4 attempts per task
    (`local[N,4]`); any other master (one that names its attempts, local-cluster, k8s) unchanged."""
    match = _LOCAL_MASTER.fullmatch(master)
    if match is None:
        return master
    return f"local[{match.group(1) or 1},{LOCAL_TASK_ATTEMPTS}]"


def redacted(conf: dict[str, str]) -> dict[str, str]:
    """The conf with anything secret-looking masked, for logs."""
    return {k: ("*****" if any(m in k.lower() for m in SECRET_MARKERS) else v) for k, v in conf.items()}


def build_session(settings: RuntimeSettings) -> "SparkSession":
    """Start (or, under spark-submit, join) the Spark session with `engine_conf`."""
    from pyspark.sql import SparkSession

    jars = extra_jars(os.environ.get(JARS_DIR_ENV))
    conf = engine_conf(settings, jars)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("STREAMJOB_SPARK_LOG_LEVEL", "WARN"))
    # Under spark-submit the session already existed: SQL confs still apply,
    # JVM-shaping ones (classpath, master) came from the spark-submit flags.
    for key, value in conf.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)
    chosen = dict(settings.spark_conf).get(CHECKPOINT_MANAGER_CONF)
    if chosen is not None:
        log.info("kept checkpoint file manager class=%s reason=set by --conf", chosen)
    elif settings.checkpoint_location.startswith("s3a://"):
        if class_available(spark, ABORTABLE_CHECKPOINT_MANAGER):
            spark.conf.set(CHECKPOINT_MANAGER_CONF, ABORTABLE_CHECKPOINT_MANAGER)
            log.info("selected checkpoint file manager class=%s", ABORTABLE_CHECKPOINT_MANAGER)
        else:
            log.warning(
                "kept default checkpoint file manager reason=%s not on the classpath (add spark-hadoop-cloud)",
                ABORTABLE_CHECKPOINT_MANAGER,
            )
    log.info(
        "started spark session job=%s spark=%s master=%s statePartitions=%s jars=%d",
        settings.job_id,
        spark.version,
        spark.sparkContext.master,
        settings.state_partitions,
        len(jars),
    )
    log.debug("applied spark conf %s", redacted(conf))
    return spark


def class_available(spark: "SparkSession", class_name: str) -> bool:
    """Whether the driver JVM can load `class_name` (a connector or file manager)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(class_name, False, loader)
        return True
    except Exception:
        return False
