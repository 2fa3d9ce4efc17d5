"""PyFlink and its Kafka connector for benchmarks/flink_compare.py, installed once into the StreamJob cache.

Called by flink_compare.py only. PyFlink gets a virtualenv of its own (its pinned
dependencies must not meet pyspark's), keyed by the PyFlink and Python versions; the
connector jar comes from Maven Central with `mvn dependency:copy`, as
testbed/build/fetch-jars.sh fetches Spark's Kafka jars, into a folder keyed by its
version. Both are complete only once their `.complete` marker exists, so an interrupted
download is redone, and a fresh machine pays once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

from testbed.locate import cache_root

PYFLINK_VERSION = "2.2.1"
# the connector release built against Flink 2.2 (Maven Central has no build for 2.3 yet)
CONNECTOR = "org.apache.flink:flink-sql-connector-kafka:5.0.0-2.2"


def _say(message: str) -> None:
    print(f"flink_env: {message}", file=sys.stderr, flush=True)


def pyflink_python(version: str = PYFLINK_VERSION) -> Path:
    """The python of a virtualenv with apache-flink `version` (created and installed on first use)."""
    home = cache_root() / "flink" / f"pyflink-{version}-py{sys.version_info.major}{sys.version_info.minor}"
    python = home / "bin" / "python"
    if (home / ".complete").exists():
        return python
    _say(f"installing apache-flink=={version} into {home} (first run only)")
    shutil.rmtree(home, ignore_errors=True)
    venv.create(home, with_pip=True)
    # run from the venv, not the caller's folder: `-m` puts the working folder first on sys.path, and the
    # repository's root holds operator/, which would shadow the standard library's operator module
    result = subprocess.run([str(python), "-m", "pip", "install", "-q", f"apache-flink=={version}"], cwd=home,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"pip could not install apache-flink=={version} into {home}:\n{result.stderr[-3000:]}")
    (home / ".complete").touch()
    return python


def connector_jar(coordinate: str = CONNECTOR) -> Path:
    """Flink's Kafka SQL connector (one shaded jar) from Maven Central, cached by version."""
    _, artifact, version = coordinate.split(":")
    folder = cache_root() / "jars" / f"{artifact}-{version}"
    jar = folder / f"{artifact}-{version}.jar"
    if (folder / ".complete").exists():
        return jar
    _say(f"fetching {coordinate} (first run only)")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    result = subprocess.run(["mvn", "-B", "-ntp", "dependency:copy", f"-Dartifact={coordinate}",
                             f"-DoutputDirectory={partial}", "-Dmdep.overWriteReleases=true"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (partial / jar.name).exists():
        raise SystemExit(f"Maven could not download {coordinate}:\n{result.stdout[-3000:]}")
    (partial / ".complete").touch()
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    return jar


if __name__ == "__main__":
    print(pyflink_python())
    print(connector_jar())
