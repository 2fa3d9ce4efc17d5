# syntax=docker/dockerfile:1
# The StreamJob runtime image: Java 17, Apache Spark 4.3.0 (pyspark's pip
# distribution), the s3a:// and Kafka jars, and the StreamJob job runtime. Roles:
#   driver    `streamjob-runtime run ...` (what the operator's driver pods run:
#             the runtime is the main process and starts Spark's client-mode
#             driver JVM); `driver ARGS` runs spark-submit in client mode
#   executor  `executor` (Spark's Kubernetes executor pods)
# Build from the repository root (BuildKit, the default of docker build since
# Docker 23, or buildah: RUN --mount is used for caches and build tools):
#   docker build -t ghcr.io/streamjob/streamjob-runtime:0.1.0 .
# Runs as uid/gid 185 with a read-only root filesystem; it writes only to /tmp
# (java.io.tmpdir, spark.local.dir), which the operator mounts as an emptyDir.
# Sizes, build times and versions: docs/images.md.
# The first three steps are byte for byte those of images/operator/Dockerfile,
# so a builder's layer cache shares them between the two images.
ARG BASE_IMAGE=docker.io/library/debian:12.11-slim
# Apache Maven, to resolve the jars (Maven Central's binary distribution, checked by its sha512)
ARG MAVEN_VERSION=3.9.11
ARG MAVEN_SHA512=bcfe4fe305c962ace56ac7b5fc7a08b87d5abd8b7e89027ab251069faebee516b0ded8961445d6d91ec1985dfe30f8153268843c89aa392733d1a3ec956c9978

# --- Python and the project's common dependencies (shared with the operator image)
FROM ${BASE_IMAGE} AS python
ENV VIRTUAL_ENV=/opt/streamjob/venv \
    PATH=/opt/streamjob/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv tini \
 && rm -rf /var/lib/apt/lists/*
COPY images/constraints.txt /build/constraints.txt
# wheels under the pip cache's wheelhouse/ are used first (scripts/build-images.sh
# puts the ones this machine already built there; elsewhere it does not exist)
RUN --mount=type=cache,id=streamjob-pip,target=/root/.cache/pip,sharing=locked \
    python3 -m venv "$VIRTUAL_ENV" \
 && pip install -c /build/constraints.txt pip \
 && pip install --find-links /root/.cache/pip/wheelhouse -c /build/constraints.txt \
        "kopf>=1.38,<2" "kubernetes>=30,<37" "boto3>=1.34,<2" "pyyaml>=6,<7" "pydantic>=2.7,<3" \
        "prometheus-client>=0.20,<1" "click>=8.1,<9" "rich>=13.7,<16"

# --- the project as a wheel (the test bed is a distribution of its own: not in the build context)
FROM python AS wheel
COPY pyproject.toml README.md /build/src/
COPY operator /build/src/operator
COPY contract /build/src/contract
COPY job_runtime /build/src/job_runtime
COPY cli /build/src/cli
RUN --mount=type=cache,id=streamjob-pip,target=/root/.cache/pip,sharing=locked \
    pip wheel --no-deps -w /build/dist /build/src

# --- the image
FROM python
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 185 spark \
 && useradd --system --uid 185 --gid 185 --home-dir /opt/spark/work-dir --no-create-home spark
ENV SPARK_HOME=/opt/spark \
    PATH=/opt/streamjob/venv/bin:/opt/spark/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYSPARK_PYTHON=/opt/streamjob/venv/bin/python
# Spark is pyspark's distribution (the JVM and Python sides are one version);
# /opt/spark is its home, as in Apache Spark's images. confluent-kafka: the
# exactly-once Kafka sink's transactions; pyarrow: how its records reach Python,
# on the driver (job_runtime/kafka/driver_rows.py) and in the tasks (mapInArrow).
RUN --mount=type=cache,id=streamjob-pip,target=/root/.cache/pip,sharing=locked \
    pip install --find-links /root/.cache/pip/wheelhouse -c /build/constraints.txt pyspark==4.3.0 "confluent-kafka>=2.16,<3" "pyarrow>=16,<27" \
 && ln -s "$(python3 -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
 && mkdir -p /opt/spark/work-dir && chown 185:185 /opt/spark/work-dir
# The jars, resolved by Maven straight into Spark's jar directory: s3a://
# (images/runtime/pom.xml) and Spark's Kafka connector (images/runtime/kafka-jars.txt,
# the one list, taken as listed: not transitive). Maven itself (Apache's binary
# distribution from Maven Central, checked by its sha512) is kept in the Maven
# cache mount, never in the image.
ARG MAVEN_VERSION
ARG MAVEN_SHA512
COPY images/runtime/pom.xml images/runtime/kafka-jars.txt /build/jars/
RUN --mount=type=cache,id=streamjob-m2,target=/root/.m2,sharing=locked \
    mvn="/root/.m2/apache-maven-${MAVEN_VERSION}" \
 && if [ ! -x "$mvn/bin/mvn" ]; then \
      python3 -c 'import hashlib, sys, urllib.request; data = urllib.request.urlopen(sys.argv[1], timeout=120).read(); \
sys.exit("sha512 mismatch: " + sys.argv[1]) if hashlib.sha512(data).hexdigest() != sys.argv[2] else open("/tmp/maven.tgz", "wb").write(data)' \
        "https://repo1.maven.org/maven2/org/apache/maven/apache-maven/${MAVEN_VERSION}/apache-maven-${MAVEN_VERSION}-bin.tar.gz" "${MAVEN_SHA512}" \
      && mkdir -p "$mvn.partial" && tar -xzf /tmp/maven.tgz -C "$mvn.partial" --strip-components=1 && rm /tmp/maven.tgz \
      && mv "$mvn.partial" "$mvn"; \
    fi \
 && kafka=$(grep -v -e '^#' -e '^[[:space:]]*$' /build/jars/kafka-jars.txt | while IFS=: read -r g a v; do \
        printf '<dependency><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version><exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>' "$g" "$a" "$v"; done) \
 && sed -i "s|<!-- kafka-jars.txt -->|$kafka|" /build/jars/pom.xml \
 && "$mvn/bin/mvn" -B -ntp -f /build/jars/pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory=/opt/spark/jars \
 && rm -rf /build/jars
COPY images/runtime/entrypoint.sh /opt/entrypoint.sh
COPY --from=wheel /build/dist/ /build/dist/
RUN pip install --no-deps --no-cache-dir /build/dist/streamjob-*.whl \
 && site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && rm -rf /build \
 && mkdir -p /opt/streamjob \
 && ln -s "$site/job_runtime/driver.py" /opt/streamjob/driver.py \
 && python3 -m compileall -q "$site/streamjob_contract" "$site/job_runtime" "$site/streamjob_operator" "$site/streamjob_cli"
WORKDIR /opt/spark/work-dir
USER 185:185
ENTRYPOINT ["/opt/entrypoint.sh"]
