#!/usr/bin/env bash
# Fetches the Apache Kafka broker for the test bed with Maven: the official
# org.apache.kafka:kafka_2.13 jar and its runtime dependencies from Maven
# Central, run by testbed/kafka.py as a single KRaft node (no ZooKeeper).
# Usage: fetch-kafka.sh    (called by scripts/bootstrap.sh)
# Prints the directory holding the jars on stdout; progress goes to stderr.
# The directory is keyed by the Kafka version, so only the first run downloads.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.2.0}"
# the SLF4J binding Kafka's distribution ships (the Maven artifact has none),
# at the Log4j 2 version kafka_2.13 depends on: without it the broker logs nothing
LOG4J_VERSION="${LOG4J_VERSION:-2.25.3}"

die() { echo "fetch-kafka: error: $*" >&2; exit 1; }
say() { echo "fetch-kafka: $*" >&2; }
command -v mvn >/dev/null 2>&1 || die "Maven is not installed (it fetches the Kafka broker jars): apt-get install maven"

CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
OUT="$CACHE_ROOT/jars/kafka-broker-$KAFKA_VERSION-log4j-$LOG4J_VERSION"
if [[ -f "$OUT/.complete" ]]; then echo "$OUT"; exit 0; fi

say "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies (first run only)"
work=$(mktemp -d "${TMPDIR:-/tmp}/streamjob-fetch-kafka.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>streamjob.local</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM
tmp_out="$OUT.partial"
rm -rf "$tmp_out"
mkdir -p "$tmp_out"
if ! mvn -B -ntp -f "$work/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp_out" >"$work/mvn.log" 2>&1; then
  tail -n 30 "$work/mvn.log" >&2
  die "Maven could not download org.apache.kafka:kafka_2.13:$KAFKA_VERSION; see the output above"
fi
[[ -f "$tmp_out/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "Maven ran but kafka_2.13-$KAFKA_VERSION.jar is missing from $tmp_out"
echo "kafka=$KAFKA_VERSION" >"$tmp_out/versions.txt"
touch "$tmp_out/.complete"
rm -rf "$OUT"
mv "$tmp_out" "$OUT"
say "Kafka broker jars ready in $OUT"
echo "$OUT"
