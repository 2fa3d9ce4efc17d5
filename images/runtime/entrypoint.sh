#!/bin/bash
# The runtime image's entrypoint, with the roles of Apache Spark's
# kubernetes/dockerfiles/spark/entrypoint.sh (which pyspark's pip package
# does not ship):
#   executor     what Spark's Kubernetes scheduler runs in an executor pod
#                (KubernetesExecutorBackend, configured by SPARK_* variables)
#   driver ARGS  spark-submit in client mode (for spark-submit users; StreamJob
#                drivers run `streamjob-runtime run ...` as the main process)
#   anything else is run as is.
# tini reaps zombies and forwards signals to the JVM.
set -eo pipefail

SPARK_CLASSPATH="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}${SPARK_HOME}/jars/*"
if [[ -n "${SPARK_EXTRA_CLASSPATH}" ]]; then SPARK_CLASSPATH="$SPARK_CLASSPATH:$SPARK_EXTRA_CLASSPATH"; fi
if [[ -n "${HADOOP_CONF_DIR}" ]]; then SPARK_CLASSPATH="$HADOOP_CONF_DIR:$SPARK_CLASSPATH"; fi
if [[ -n "${SPARK_CONF_DIR}" ]]; then
  SPARK_CLASSPATH="$SPARK_CONF_DIR:$SPARK_CLASSPATH"
elif [[ -d "${SPARK_HOME}/conf" ]]; then
  SPARK_CLASSPATH="$SPARK_HOME/conf:$SPARK_CLASSPATH"
fi

case "$1" in
  driver)
    shift 1
    CMD=("$SPARK_HOME/bin/spark-submit" --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS"
         --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" --deploy-mode client "$@")
    ;;
  executor)
    shift 1
    mapfile -t SPARK_EXECUTOR_JAVA_OPTS < <(env | grep '^SPARK_JAVA_OPT_' | sort -t_ -k4 -n | sed 's/[^=]*=\(.*\)/\1/g')
    CMD=(java "${SPARK_EXECUTOR_JAVA_OPTS[@]}" -Xms"$SPARK_EXECUTOR_MEMORY" -Xmx"$SPARK_EXECUTOR_MEMORY"
         -cp "$SPARK_CLASSPATH${SPARK_DIST_CLASSPATH:+:$SPARK_DIST_CLASSPATH}"
         org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend
         --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" --cores "$SPARK_EXECUTOR_CORES"
         --app-id "$SPARK_APPLICATION_ID" --hostname "$SPARK_EXECUTOR_POD_IP"
         --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" --podName "$SPARK_EXECUTOR_POD_NAME")
    ;;
  *)
    CMD=("$@")
    ;;
esac
exec /usr/bin/tini -s -- "${CMD[@]}"
