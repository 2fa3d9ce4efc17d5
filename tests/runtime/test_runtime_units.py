"""Truth tables for the runtime's pure parts: exit codes, settings, engine conf, status, control auth.

No Spark here; the control endpoint is served for real on loopback with a fake controller.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from job_runtime.run.control import ControlError, ControlServer, authorized, parse_address
from streamjob_contract.jobdef import parse_job_definition
from job_runtime.query.pipeline import sink_input
from job_runtime.query.session import ROCKSDB_PROVIDER, engine_conf, redacted, with_task_attempts
from job_runtime.settings import RuntimeSettings, S3Settings, SettingsError, validate
from job_runtime.query.progress import LateRowsTotal, batch_line, batch_lines, progress_fields, read_batch_line
from streamjob_contract.runtime_status import RuntimeStatus, watermark_ms


def settings(**overrides: Any) -> RuntimeSettings:
    base: dict[str, Any] = dict(
        job_file=Path("job.json"), name="clicks", namespace="team", checkpoint_location="s3a://b/ckpt",
        state_partitions=8, token_file=Path("token"),
    )
    base.update(overrides)
    return RuntimeSettings(**base)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"checkpoint_location": "/tmp/x"}, "--checkpoint: must start with", id="checkpoint-scheme"),
        pytest.param({"state_partitions": 0}, "--state-partitions: must be >= 1", id="partitions"),
        pytest.param({"trigger_interval": "soon"}, "--trigger-interval: expected", id="trigger"),
        pytest.param({"restore_from": "hdfs://x"}, "--restore-from: must start with", id="restore-scheme"),
        pytest.param({"token_file": None}, "--token-file: required", id="token"),
        pytest.param({"s3": S3Settings(endpoint="minio:9000")}, "--s3-endpoint: must start with http", id="endpoint"),
    ],
)
def test_settings_refusals(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        validate(settings(**overrides))


def test_settings_accept_bounded_and_interval_triggers() -> None:
    assert validate(settings(trigger_interval="available-now")).available_now
    assert not validate(settings(trigger_interval="500 milliseconds")).available_now


def test_engine_conf_sets_the_state_store_and_pins_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    conf = engine_conf(settings(s3=S3Settings(endpoint="http://127.0.0.1:9000", path_style=True)), [Path("/jars/a.jar")])
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_PROVIDER
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert "EnvironmentVariableCredentialsProvider" in conf["spark.hadoop.fs.s3a.aws.credentials.provider"]
    assert conf["spark.driver.extraClassPath"] == "/jars/a.jar"
    assert "do-not-leak" not in json.dumps(conf)


@pytest.mark.parametrize(("master", "expected"), [
    ("local", "local[1,4]"), ("local[2]", "local[2,4]"), ("local[*]", "local[*,4]"),
    ("local[2,1]", "local[2,1]"), ("local-cluster[2,1,1024]", "local-cluster[2,1,1024]"),
    ("k8s://https://10.0.0.1:443", "k8s://https://10.0.0.1:443"), ("local[0]", "local[0]"),
])
def test_a_local_master_gets_four_attempts_per_task(master: str, expected: str) -> None:
    assert with_task_attempts(master) == expected


def test_a_local_master_takes_task_results_directly_and_a_users_conf_wins() -> None:
    conf = engine_conf(settings(master="local[2]"))
    assert conf["spark.master"] == "local[2,4]" and conf["spark.task.maxDirectResultSize"] == "128m"
    assert "spark.task.maxDirectResultSize" not in engine_conf(settings(master="local-cluster[2,1,1024]"))
    assert engine_conf(settings(master="local[2]", spark_conf=(("spark.task.maxDirectResultSize", "1m"),)))[
        "spark.task.maxDirectResultSize"] == "1m"


def test_engine_conf_refuses_overriding_owned_confs_and_masks_secrets() -> None:
    with pytest.raises(SettingsError, match="--conf spark.sql.shuffle.partitions: is set by --state-partitions"):
        engine_conf(settings(spark_conf=(("spark.sql.shuffle.partitions", "3"),)))
    conf = engine_conf(settings(spark_conf=(("spark.hadoop.fs.s3a.secret.key", "s3cr3t"), ("spark.executor.cores", "2"))))
    shown = redacted(conf)
    assert shown["spark.hadoop.fs.s3a.secret.key"] == "*****" and shown["spark.executor.cores"] == "2"


PROGRESS = {
    "batchId": 7,
    "timestamp": "2024-01-01T00:01:00.000Z",
    "numInputRows": 12,
    "inputRowsPerSecond": 4.0,
    "processedRowsPerSecond": "NaN",
    "durationMs": {"triggerExecution": 850},
    "eventTime": {"watermark": "2024-01-01T00:00:15.000Z"},
    "stateOperators": [
        {"numRowsTotal": 5, "memoryUsedBytes": 1000, "numRowsDroppedByWatermark": 1},
        {"numRowsTotal": 2, "memoryUsedBytes": 24, "numRowsDroppedByWatermark": 0},
    ],
}


def test_status_fields_from_progress() -> None:
    fields = progress_fields(PROGRESS)
    assert fields["lastBatchId"] == 7
    assert fields["watermarkMs"] == watermark_ms("2024-01-01T00:00:15.000Z") == 1_704_067_215_000
    assert fields["stateRows"] == 7 and fields["stateMemoryBytes"] == 1024 and fields["rowsDroppedByWatermark"] == 1
    assert fields["batchDurationMs"] == 850 and fields["processedRowsPerSecond"] is None
    before_first = RuntimeStatus.checked({"state": "RUNNING", **progress_fields(None)})
    assert {key: before_first[key] for key in fields} == dict.fromkeys(fields)  # every progress field says None
    assert set(fields) < set(before_first)


def test_batch_line_says_where_a_batch_s_time_went() -> None:
    ran = {**PROGRESS, "durationMs": {"triggerExecution": 850, "addBatch": 600, "walCommit": 40, "getBatch": 1,
                                      "queryPlanning": 90, "latestOffset": 30}}
    assert batch_line(ran) == ("id=7 rows=12 stateRows=7 durationMs=latestOffset:30,queryPlanning:90,walCommit:40,"
                               "addBatch:600,triggerExecution:850")
    assert batch_line(PROGRESS) is None  # an idle trigger: no batch ran
    assert batch_lines([PROGRESS, ran, {**ran, "batchId": 8}], "team/clicks") == [
        f"batch job=team/clicks {batch_line(ran)}", f"batch job=team/clicks {batch_line(ran)}".replace("id=7", "id=8")]
    # the one reader of the format (benchmarks, tests) reads back what was logged
    logged = f"2026-12-06 04:24:00,000 INFO job_runtime.runner: {batch_lines([ran], 'team/clicks')[0]}"
    assert read_batch_line(logged) == {"id": 7, "rows": 12, "stateRows": 7, "latestOffset": 30, "queryPlanning": 90,
                                       "walCommit": 40, "addBatch": 600, "triggerExecution": 850}
    assert read_batch_line("2026-12-06 04:24:00,000 INFO job_runtime.runner: finished query job=team/clicks") is None


def _report(batch: int, dropped: int, ran: bool = True) -> dict[str, object]:
    duration = {"triggerExecution": 10, **({"addBatch": 5} if ran else {})}
    return {"batchId": batch, "durationMs": duration, "stateOperators": [{"numRowsDroppedByWatermark": dropped}]}


def test_late_rows_total_counts_every_batch_that_ran_once() -> None:
    late = LateRowsTotal()
    assert late.needs_history("run-1", _report(3, 2))  # first call of a query: what ran before is in its history
    late.add("run-1", [_report(1, 1), _report(2, 0), _report(3, 2), _report(4, 0, ran=False)])  # an idle trigger: not a batch
    assert (late.total, late.counted_batch) == (3, 3)
    assert not late.needs_history("run-1", _report(4, 5))
    late.add("run-1", [_report(4, 5)])  # batch 4 ran after the idle report with its id
    late.add("run-1", [_report(4, 5)])  # polled again before the next batch: not counted twice
    assert late.total == 8
    assert late.needs_history("run-1", _report(7, 1))  # batches 5 and 6 ran between two polls
    late.add("run-1", [_report(b, 1) for b in range(2, 8)])
    assert (late.total, late.counted_batch) == (11, 7)
    assert late.needs_history("run-2", _report(8, 1))  # a new query in the same driver: batch ids go on
    late.add("run-2", [_report(7, 4), _report(8, 1)])  # batch 7 re-run after the restart counts once
    assert late.total == 12


def test_sink_input_defaults_to_last_transform_then_first_source() -> None:
    source = {"name": "events", "kind": "rate"}
    sink = {"kind": "console"}
    assert sink_input(parse_job_definition({"pipeline": {"sources": [source], "sink": sink}}).pipeline) == "events"  # type: ignore[arg-type]
    with_transform = {"sources": [source], "transforms": [{"name": "t", "sql": "SELECT 1"}], "sink": sink}
    assert sink_input(parse_job_definition({"pipeline": with_transform}).pipeline) == "t"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        pytest.param("Bearer s3cret-token", True, id="right"),
        pytest.param("bearer s3cret-token", True, id="scheme-case"),
        pytest.param("Bearer s3cret-tokeN", False, id="wrong"),
        pytest.param("Bearer ", False, id="empty"),
        pytest.param("Basic s3cret-token", False, id="scheme"),
        pytest.param(None, False, id="missing"),
    ],
)
def test_bearer_check(header: str | None, ok: bool) -> None:
    assert authorized(header, "s3cret-token") is ok


def test_parse_address() -> None:
    assert parse_address("10.0.0.7:7077") == ("10.0.0.7", 7077)
    assert parse_address("[::1]:0") == ("::1", 0)
    with pytest.raises(ValueError, match="--control-address"):
        parse_address("7077")


class FakeController:
    def __init__(self) -> None:
        self.requests: list[tuple[str | None, bool]] = []

    def health(self) -> tuple[bool, dict[str, Any]]:
        return True, {"state": "RUNNING"}

    def status(self) -> dict[str, Any]:
        return {"state": "RUNNING", "lastBatchId": 3}

    def request_savepoint(self, path: str | None, stop: bool, savepoint_id: str | None = None) -> dict[str, Any]:
        if self.requests:
            raise ControlError(HTTPStatus.CONFLICT, "savepoint abc is in progress")
        self.requests.append((path, stop))
        return {"id": savepoint_id or "abc", "path": path or "s3://b/sp"}

    def savepoint(self, savepoint_id: str) -> dict[str, Any] | None:
        return {"id": "abc", "state": "IN_PROGRESS"} if savepoint_id == "abc" else None

    def savepoints(self) -> list[dict[str, Any]]:
        return []

    def request_stop(self) -> dict[str, Any]:
        return {"state": "STOPPING"}


def call(address: str, method: str, path: str, token: str | None, body: bytes | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(f"http://{address}{path}", data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_control_endpoint_routes_and_refusals(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    fake = FakeController()
    server = ControlServer("127.0.0.1:0", token_file, fake)
    server.start()
    try:
        a = server.address
        assert call(a, "GET", "/healthz", None) == (200, {"state": "RUNNING"})
        assert call(a, "GET", "/status", None)[0] == 401
        assert call(a, "GET", "/status", "nope")[0] == 401
        assert call(a, "GET", "/status", "s3cret-token") == (200, {"state": "RUNNING", "lastBatchId": 3})
        assert call(a, "POST", "/savepoints", "s3cret-token", b'{"stop": "yes"}')[0] == 400
        assert call(a, "POST", "/savepoints", "s3cret-token", b"not json")[0] == 400
        assert call(a, "POST", "/savepoints", "s3cret-token", b'{"stop": true}') == (202, {"id": "abc", "path": "s3://b/sp"})
        assert fake.requests == [(None, True)]
        assert call(a, "POST", "/savepoints", "s3cret-token", b"{}")[0] == 409
        assert call(a, "GET", "/savepoints/abc", "s3cret-token")[1]["state"] == "IN_PROGRESS"
        assert call(a, "GET", "/savepoints/zzz", "s3cret-token")[0] == 404
        assert call(a, "POST", "/stop", "s3cret-token") == (202, {"state": "STOPPING"})
        assert call(a, "DELETE", "/status", "s3cret-token")[0] == 404
        token_file.write_text("")  # an emptied token file opens nothing
        assert call(a, "GET", "/status", "")[0] == 401
    finally:
        server.close()
