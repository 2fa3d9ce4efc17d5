# The StreamJob image: Apache Spark with PySpark, the StreamJob job runtime
# and the operator. One image, three roles:
#   driver    streamjob-runtime run ... --master k8s://... : the runtime is the
#             main process (SIGTERM reaches it) and starts Spark's client-mode
#             driver JVM; /opt/streamjob/driver.py serves spark-submit users
#   executor  args [executor], through Spark's own /opt/entrypoint.sh
#   operator  streamjob-operator (the Helm chart's Deployment)
# The Spark version must match the pyspark pin in pyproject.toml.
ARG SPARK_VERSION=4.3.0
FROM docker.io/library/spark:${SPARK_VERSION}-scala2.13-java17-python3-ubuntu

USER root
ARG HADOOP_AWS_VERSION=3.5.0
ARG AWS_SDK_BUNDLE_VERSION=2.35.4
# s3a:// support: hadoop-aws at the Hadoop version Spark bundles, and the AWS
# SDK bundle its POM names (testbed/build/fetch-jars.sh resolves the same pair
# for the local test bed).
ADD https://repo1.maven.org/maven2/org/apache/hadoop/hadoop-aws/${HADOOP_AWS_VERSION}/hadoop-aws-${HADOOP_AWS_VERSION}.jar /opt/spark/jars/
ADD https://repo1.maven.org/maven2/software/amazon/awssdk/bundle/${AWS_SDK_BUNDLE_VERSION}/bundle-${AWS_SDK_BUNDLE_VERSION}.jar /opt/spark/jars/
# Spark's Kafka connector: the coordinates in testbed/build/kafka-jars.txt (the one
# list; tests/unit/test_kafka_jars.py checks these lines against it)
ADD https://repo1.maven.org/maven2/org/apache/spark/spark-sql-kafka-0-10_2.13/4.2.0/spark-sql-kafka-0-10_2.13-4.2.0.jar /opt/spark/jars/
ADD https://repo1.maven.org/maven2/org/apache/spark/spark-token-provider-kafka-0-10_2.13/4.2.0/spark-token-provider-kafka-0-10_2.13-4.2.0.jar /opt/spark/jars/
ADD https://repo1.maven.org/maven2/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar /opt/spark/jars/
ADD https://repo1.maven.org/maven2/org/apache/commons/commons-pool2/2.13.1/commons-pool2-2.13.1.jar /opt/spark/jars/

WORKDIR /opt/streamjob
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY job_runtime ./job_runtime
COPY testbed ./testbed
# pyspark is the base image's own (/opt/spark/python), put on the path by a .pth
# file, so Python and the JVM are always the same Spark
RUN site="$(python3 -c 'import site; print(site.getsitepackages()[0])')" \
 && { echo /opt/spark/python; ls /opt/spark/python/lib/py4j-*-src.zip; } > "$site/spark.pth" \
 && pip install --no-cache-dir --no-deps . \
 && pip install --no-cache-dir "kopf>=1.38,<2" "kubernetes>=30,<37" "boto3>=1.34,<2" "pyyaml>=6,<7" \
        "pydantic>=2.7,<3" "prometheus-client>=0.20,<1" "confluent-kafka>=2.16,<3" \
 && ln -s "$(python3 -c 'import job_runtime, os; print(os.path.dirname(job_runtime.__file__))')/driver.py" /opt/streamjob/driver.py \
 && chmod -R a+rX /opt/streamjob /opt/spark/jars

USER 185
ENV PYTHONUNBUFFERED=1
