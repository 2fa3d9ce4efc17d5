"""The exit-code contract (streamjob_contract.exitcodes) as the operator will see it, from real processes.

Refusals that need no JVM are checked first (quick); the ones that need Spark
(a query that throws, a Kafka source without its connector, SQL that does not
resolve) run as three processes at once. SIGTERM -> 11 is checked in
test_runtime_savepoints, stop-with-savepoint -> 10 there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runtime_harness import REPO, RuntimeProcess, example_job, run_args, runtime_env

from streamjob_contract.exitcodes import ExitCode


def run_quick(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A runtime process expected to exit before starting Spark."""
    return subprocess.run(
        [sys.executable, "-m", "job_runtime.main", *args],
        cwd=tmp_path, env=runtime_env(), capture_output=True, text=True, timeout=60,
    )


def test_invalid_job_and_arguments_exit_12_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("pipeline:\n  sources: [{name: events, kind: socket}]\n  sink: {kind: console}\n")
    token = tmp_path / "token"
    token.write_text("t")
    common = ["--name", "j", "--namespace", "n", "--state-partitions", "2", "--token-file", str(token)]

    result = run_quick(tmp_path, "run", "--job", str(bad), "--checkpoint", (tmp_path / "c").as_uri(), *common)
    assert result.returncode == ExitCode.INVALID_JOB, result.stderr
    assert "job.pipeline.sources.0.kind" in result.stderr and "socket" in result.stderr

    missing = run_quick(tmp_path, "run", "--job", str(tmp_path / "absent.json"), "--checkpoint", (tmp_path / "c").as_uri(), *common)
    assert missing.returncode == ExitCode.INVALID_JOB and "absent.json" in missing.stderr

    good = example_job("tumbling", tmp_path / "in", tmp_path / "out", tmp_path / "job.json")
    usage = run_quick(tmp_path, "run", "--job", str(good), *common)  # no --checkpoint
    assert usage.returncode == ExitCode.INVALID_JOB and "--checkpoint" in usage.stderr

    trigger = run_quick(tmp_path, "run", "--job", str(good), "--checkpoint", "/no/scheme", *common)
    assert trigger.returncode == ExitCode.INVALID_JOB and "--checkpoint" in trigger.stderr

    owned = run_quick(
        tmp_path, "run", "--job", str(good), "--checkpoint", (tmp_path / "c").as_uri(), *common,
        "--conf", "spark.sql.shuffle.partitions=7",
    )
    assert owned.returncode == ExitCode.INVALID_JOB and "spark.sql.shuffle.partitions" in owned.stderr

    assert run_quick(tmp_path, "validate", "--job", str(good)).returncode == 0
    assert run_quick(tmp_path, "validate", "--job", str(bad)).returncode == ExitCode.INVALID_JOB


def test_exit_code_passes_through_spark_submit(tmp_path: Path) -> None:
    # The driver pod may run `spark-submit job_runtime/driver.py run ...`: the contract must survive it.
    import pyspark

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"pipeline": {"sources": [{"name": "x", "kind": "rate"}], "sink": {"kind": "files"}}}))
    result = subprocess.run(
        [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         str(REPO / "job_runtime" / "driver.py"), "run", "--job", str(bad), "--name", "j", "--namespace", "n",
         "--checkpoint", (tmp_path / "c").as_uri(), "--state-partitions", "1", "--token-file", str(bad)],
        cwd=tmp_path, env=runtime_env({"PYSPARK_PYTHON": sys.executable}), capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == ExitCode.INVALID_JOB, result.stderr[-3000:]
    # spark-submit forwards the Python driver's stderr to its stdout
    assert "files and foreachBatch sinks need path and format" in result.stdout + result.stderr


def test_restore_refusals_exit_13(tmp_path: Path) -> None:
    job = example_job("tumbling", tmp_path / "in", tmp_path / "out", tmp_path / "job.json")
    token = tmp_path / "token"
    token.write_text("t")
    common = ["--job", str(job), "--name", "j", "--namespace", "n", "--token-file", str(token),
              "--termination-message-file", str(tmp_path / "term.json")]

    not_a_savepoint = tmp_path / "half-written-savepoint"
    (not_a_savepoint / "offsets").mkdir(parents=True)
    result = run_quick(
        tmp_path, "run", *common, "--state-partitions", "2", "--checkpoint", (tmp_path / "fresh").as_uri(),
        "--restore-from", not_a_savepoint.as_uri(),
    )
    assert result.returncode == ExitCode.RESTORE_REFUSED, result.stderr
    assert "_savepoint.json" in result.stderr and str(not_a_savepoint) in result.stderr
    assert json.loads((tmp_path / "term.json").read_text())["outcome"] == "restoreRefused"

    # A checkpoint whose offset log pins 4 state partitions (the format Spark writes), run with 2.
    pinned = tmp_path / "pinned"
    (pinned / "offsets").mkdir(parents=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {"spark.sql.shuffle.partitions": "4"}}
    (pinned / "offsets" / "0").write_text("v1\n" + json.dumps(meta) + '\n{"logOffset":0}')
    result = run_quick(tmp_path, "run", *common, "--state-partitions", "2", "--checkpoint", pinned.as_uri())
    assert result.returncode == ExitCode.RESTORE_REFUSED, result.stderr
    assert "--state-partitions 2" in result.stderr and "spark.sql.shuffle.partitions=4" in result.stderr


def test_spark_side_failures_exit_with_their_codes(processes: list[RuntimeProcess], tmp_path: Path) -> None:
    events = tmp_path / "events"
    events.mkdir()
    (events / "e.json").write_text('{"user": "alice", "ts": "2024-01-01T00:00:01Z", "amount": 99}\n')
    source = {
        "name": "events", "kind": "files", "format": "json", "path": events.as_uri(),
        "schema": "user STRING, ts TIMESTAMP, amount INT",
    }
    sink = {"kind": "files", "format": "json", "path": (tmp_path / "out").as_uri()}
    jobs = {
        "throws": {"sources": [source], "sink": sink, "transforms": [{"name": "checked", "sql":
            "SELECT user, ts, CASE WHEN amount > 50 THEN raise_error(concat('amount too large: ', amount)) "
            "ELSE amount END AS amount FROM events"}]},
        "kafka": {"sources": [{"name": "clicks", "kind": "kafka", "options": {
            "subscribe": "clicks", "kafka.bootstrap.servers": "127.0.0.1:9",
            # the admin client's deadline, and its retries, bound how long an unreachable broker takes to fail
            "kafka.default.api.timeout.ms": "5000", "fetchOffset.numRetries": "1"}}],
                  "sink": {"kind": "console"}},
        "badsql": {"sources": [source], "sink": sink, "transforms": [{"name": "t", "sql": "SELECT no_such_column FROM events"}]},
    }
    started = {}
    for name, pipeline in jobs.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"pipeline": pipeline}))
        proc = RuntimeProcess(tmp_path / name, run_args(path, (tmp_path / f"ckpt-{name}").as_uri(), name=name), label=name)
        processes.append(proc.start())
        started[name] = proc

    throws = started["throws"]
    assert throws.wait(400) == ExitCode.FAILED, throws.log_tail()
    assert "streamjob-runtime: query failed:" in throws.log_text() and "amount too large: 99" in throws.log_text()
    ended = throws.termination()
    assert ended["outcome"] == "failed" and "amount too large: 99" in ended["message"]

    # the connector is on the classpath (images/runtime/kafka-jars.txt): a broker nobody listens on
    # fails the query, and the message names the source, its brokers and its topic
    kafka = started["kafka"]
    assert kafka.wait(400) == ExitCode.FAILED, kafka.log_tail()
    assert "kafka source 'clicks': brokers 127.0.0.1:9 topic clicks" in kafka.termination()["message"], kafka.log_tail()

    badsql = started["badsql"]
    assert badsql.wait(400) == ExitCode.INVALID_JOB, badsql.log_tail()
    assert "job.pipeline.transforms[0].sql (t):" in badsql.log_text() and "no_such_column" in badsql.log_text()
