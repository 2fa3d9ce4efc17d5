#!/usr/bin/env bash
# Fetches the jars Spark needs for s3a:// with Maven, matched to the pyspark
# installed in a virtualenv:
#   - org.apache.hadoop:hadoop-aws at the Hadoop version pyspark bundles,
#   - software.amazon.awssdk:bundle at the version that hadoop-aws's POM
#     depends on,
#   - org.apache.spark:spark-hadoop-cloud_2.13 at the pyspark version, unless
#     pyspark already ships it,
#   - Spark's Kafka connector and its client, as listed in kafka-jars.txt
#     (the one list of those coordinates; the top-level Dockerfile adds the same jars).
# Usage: fetch-jars.sh VENV    (called by scripts/bootstrap.sh)
# Prints the directory holding the jars on stdout; progress goes to stderr.
# The directory is keyed by versions, so only the first run downloads.
set -euo pipefail

die() { echo "fetch-jars: error: $*" >&2; exit 1; }
say() { echo "fetch-jars: $*" >&2; }

VENV="${1:-}"
[[ -n "$VENV" ]] || die "usage: fetch-jars.sh VENV (the virtualenv whose pyspark the jars must match)"
[[ -d "$VENV" ]] || die "virtualenv $VENV does not exist"
command -v mvn >/dev/null 2>&1 || die "Maven is not installed (it resolves hadoop-aws from Maven Central): apt-get install maven"

CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"

shopt -s nullglob
spark_jars=("$VENV"/lib/python*/site-packages/pyspark/jars)
[[ ${#spark_jars[@]} -eq 1 ]] || die "pyspark is not installed in $VENV (no lib/python*/site-packages/pyspark/jars): pip install pyspark"
SPARK_JARS="${spark_jars[0]}"

hadoop_api=("$SPARK_JARS"/hadoop-client-api-*.jar)
[[ ${#hadoop_api[@]} -eq 1 ]] || die "cannot tell pyspark's Hadoop version: expected one hadoop-client-api-*.jar in $SPARK_JARS, found ${#hadoop_api[@]}"
HADOOP_VERSION=$(basename "${hadoop_api[0]}" .jar)
HADOOP_VERSION=${HADOOP_VERSION#hadoop-client-api-}

spark_core=("$SPARK_JARS"/spark-core_2.13-*.jar)
[[ ${#spark_core[@]} -eq 1 ]] || die "cannot tell pyspark's Spark version: expected one spark-core_2.13-*.jar in $SPARK_JARS"
SPARK_VERSION=$(basename "${spark_core[0]}" .jar)
SPARK_VERSION=${SPARK_VERSION#spark-core_2.13-}

KAFKA_LIST="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../images/runtime" && pwd)/kafka-jars.txt"  # the image build owns the list
mapfile -t KAFKA_JARS < <(grep -v -e '^#' -e '^[[:space:]]*$' "$KAFKA_LIST")
[[ ${#KAFKA_JARS[@]} -gt 0 ]] || die "$KAFKA_LIST lists no jars"
CONNECTOR_VERSION=$(printf '%s\n' "${KAFKA_JARS[@]}" | grep ':spark-sql-kafka-0-10_2.13:' | cut -d: -f3)
[[ -n "$CONNECTOR_VERSION" ]] || die "$KAFKA_LIST does not list org.apache.spark:spark-sql-kafka-0-10_2.13"
# keyed by the whole list too: a changed coordinate gets a new directory
KAFKA_KEY=$(grep -v -e '^#' -e '^[[:space:]]*$' "$KAFKA_LIST" | sha256sum | cut -c1-8)

OUT="$CACHE_ROOT/jars/spark-$SPARK_VERSION-hadoop-$HADOOP_VERSION-kafka-$CONNECTOR_VERSION-$KAFKA_KEY"
if [[ -f "$OUT/.complete" ]]; then echo "$OUT"; exit 0; fi

say "resolving s3a jars for Spark $SPARK_VERSION / Hadoop $HADOOP_VERSION (first run only; the AWS SDK bundle is large)"
work=$(mktemp -d "${TMPDIR:-/tmp}/streamjob-fetch-jars.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$work/mvn.log"

mvn_run() {  # what-for, mvn args...
  local what=$1; shift
  if ! mvn -B -ntp "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "Maven could not $what (mvn $*); see the output above"
  fi
}

# dependency:tree only collects POMs: this learns the SDK bundle version
# hadoop-aws was built against before anything large is downloaded.
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>streamjob.local</groupId>
  <artifactId>s3a-jars</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-aws</artifactId>
      <version>$HADOOP_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
mvn_run "resolve the dependencies of org.apache.hadoop:hadoop-aws:$HADOOP_VERSION" \
  -f "$work/pom.xml" dependency:tree -Dincludes=software.amazon.awssdk:bundle -DoutputFile="$work/tree.txt"
SDK_VERSION=$(grep -o 'software\.amazon\.awssdk:bundle:jar:[^:]*' "$work/tree.txt" | head -n1 | cut -d: -f4 || true)
[[ -n "$SDK_VERSION" ]] || die "org.apache.hadoop:hadoop-aws:$HADOOP_VERSION does not depend on software.amazon.awssdk:bundle (dependency tree: $(tr '\n' ' ' <"$work/tree.txt"))"

tmp_out="$OUT.partial"
rm -rf "$tmp_out"
mkdir -p "$tmp_out"
# hadoop-aws with its runtime dependencies: the SDK bundle, and whatever else
# that Hadoop release needs at run time (3.5 adds the S3 analytics accelerator).
# Hadoop's own modules are "provided" there, so none of them come along.
say "fetching org.apache.hadoop:hadoop-aws:$HADOOP_VERSION, software.amazon.awssdk:bundle:$SDK_VERSION and their runtime dependencies"
mvn_run "download org.apache.hadoop:hadoop-aws:$HADOOP_VERSION and its runtime dependencies" \
  -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp_out"
[[ -f "$tmp_out/hadoop-aws-$HADOOP_VERSION.jar" && -f "$tmp_out/bundle-$SDK_VERSION.jar" ]] \
  || die "Maven ran but hadoop-aws-$HADOOP_VERSION.jar or bundle-$SDK_VERSION.jar is missing from $tmp_out"

# spark-hadoop-cloud only adds the S3A committers (PathOutputCommitProtocol);
# s3a:// reads and writes work without it. Some Spark releases are on PyPI
# before (or without) this module on Maven Central: then go on without it.
cloud_note="bundled with pyspark"
cloud=("$SPARK_JARS"/spark-hadoop-cloud_2.13-*.jar)
if [[ ${#cloud[@]} -eq 0 ]]; then
  a="org.apache.spark:spark-hadoop-cloud_2.13:$SPARK_VERSION"
  say "fetching $a"
  if mvn -B -ntp dependency:copy -Dartifact="$a" -DoutputDirectory="$tmp_out" -Dmdep.overWriteReleases=true >"$log" 2>&1; then
    cloud_note="$SPARK_VERSION"
  elif grep -q -e "Could not find artifact" -e "was not found in" "$log"; then
    cloud_note="not published for $SPARK_VERSION on Maven Central; S3A committers unavailable"
    say "warning: $a is not on Maven Central; continuing without it (s3a:// works, the S3A committers do not)"
  else
    tail -n 30 "$log" >&2
    die "Maven could not download $a; see the output above"
  fi
fi
for a in "${KAFKA_JARS[@]}"; do
  say "fetching $a"
  mvn_run "download $a (listed in $KAFKA_LIST)" dependency:copy -Dartifact="$a" -DoutputDirectory="$tmp_out" -Dmdep.overWriteReleases=true
done
printf 'kafka-jars=%s\n' "${KAFKA_JARS[*]}" >"$tmp_out/kafka-versions.txt"
printf 'spark=%s\nhadoop=%s\nawssdk-bundle=%s\nspark-hadoop-cloud=%s\n' "$SPARK_VERSION" "$HADOOP_VERSION" "$SDK_VERSION" "$cloud_note" >"$tmp_out/versions.txt"
touch "$tmp_out/.complete"
rm -rf "$OUT"
mv "$tmp_out" "$OUT"
say "jars ready in $OUT"
echo "$OUT"
