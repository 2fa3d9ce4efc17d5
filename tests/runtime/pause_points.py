"""Deterministic kill instants: pause the driver at a named point, then SIGKILL it there.

Used by the runtime kill tests. Two hooks, both off unless STREAMJOB_PAUSE_AT is set:
- inside Spark's own checkpoint and sink-log writes: the CheckpointFileManager in
  tests/runtime/pausepoint/ (compiled here once per session against the venv's Spark
  jars, put on the driver's classpath and chosen with --conf), points
  "open:<regex>", "write:<regex>", "close:<regex>" on the path written;
- inside the runtime's savepoint and restore copies: job_runtime.testhooks,
  points "savepoint:<n>" and "restore:<n>".
Several points can be armed at once (a savepoint copy and a Spark write, both
paused); point i writes <pause dir>/paused-i when reached, and the test then kills
the process group, exactly as a pod kill would at that instant.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyspark

SOURCE = Path(__file__).resolve().parent / "pausepoint" / "PausingCheckpointFileManager.java"
MANAGER_CLASS = "streamjob.testhooks.PausingCheckpointFileManager"
FILE_CONTEXT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"


def build_jar(workdir: Path) -> Path:
    """Compiles the JVM hook with javac against pyspark's jars; returns the jar."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    assert javac and jar, "javac and jar (a JDK) are needed for the kill-point tests"
    classes = workdir / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    spark_jars = Path(pyspark.__file__).parent / "jars"
    subprocess.run([javac, "-nowarn", "-d", str(classes), "-cp", f"{spark_jars}/*", str(SOURCE)], check=True)
    target = workdir / "pausepoint.jar"
    subprocess.run([jar, "cf", str(target), "-C", str(classes), "."], check=True)
    return target


@dataclass(frozen=True)
class PausePoint:
    """One named instant: ``spec`` as STREAMJOB_PAUSE_AT takes it, ``what`` for messages."""

    spec: str
    what: str

    def env(self, pause_dir: Path, delegate: str | None = None) -> dict[str, str]:
        return pause_env([self], pause_dir, delegate)


def pause_env(points: list[PausePoint], pause_dir: Path, delegate: str | None = None) -> dict[str, str]:
    """The environment that arms `points` (point i writes <pause_dir>/paused-i when reached)."""
    pause_dir.mkdir(parents=True, exist_ok=True)
    for old in [*pause_dir.glob("paused-*"), *pause_dir.glob("resume-*")]:
        old.unlink()
    env = {"STREAMJOB_PAUSE_AT": "\n".join(p.spec for p in points), "STREAMJOB_PAUSE_DIR": str(pause_dir)}
    if delegate:
        env["STREAMJOB_PAUSE_DELEGATE"] = delegate
    return env


def jvm_hook_args(jar: Path) -> tuple[str, ...]:
    """The runtime options that install the JVM hook (inert while STREAMJOB_PAUSE_AT is unset)."""
    return (
        "--conf", f"spark.driver.extraClassPath={jar}",
        "--conf", f"spark.sql.streaming.checkpointFileManagerClass={MANAGER_CLASS}",
    )
