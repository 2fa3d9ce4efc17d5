"""The kubectl plugin's pure parts: ages, tables, script formats and the --wait rules.

Tables of cases against ``streamjob_cli.present`` and ``streamjob_cli.waits``; the
plugin against a real API server is tests/e2e/test_kubectl_plugin.py.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest
import yaml

from streamjob_cli import present, waits

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)


def job(name: str = "orders", namespace: str = "team-a", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-11-23T10:00:00Z", "generation": 3},
        "spec": {"state": "running"},
        "status": status,
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(None, "-", id="unknown"),
        pytest.param(0, "0s", id="zero"),
        pytest.param(59.9, "59s", id="seconds"),
        pytest.param(192, "3m12s", id="minutes-and-seconds-under-ten-minutes"),
        pytest.param(180, "3m", id="whole-minutes"),
        pytest.param(1500, "25m", id="minutes-only-past-ten"),
        pytest.param(2 * 3600 + 5 * 60, "2h5m", id="hours-and-minutes"),
        pytest.param(10 * 3600 + 5 * 60, "10h", id="hours-only-past-eight"),
        pytest.param(3 * 86400 + 4 * 3600, "3d4h", id="days-and-hours"),
        pytest.param(400 * 86400, "400d", id="days"),
    ],
)
def test_human_duration(seconds: float | None, text: str) -> None:
    assert present.human_duration(seconds) == text


@pytest.mark.parametrize(
    ("size", "text"),
    [
        pytest.param(None, "-", id="unknown"),
        pytest.param(512, "512B", id="bytes"),
        pytest.param(1536, "1.5KiB", id="kibibytes"),
        pytest.param(5 * 1024**3, "5.0GiB", id="gibibytes"),
    ],
)
def test_human_bytes(size: int | None, text: str) -> None:
    assert present.human_bytes(size) == text


@pytest.mark.parametrize(
    ("status", "lag"),
    [
        pytest.param({}, None, id="no-progress-yet"),
        pytest.param({"job": {"watermark": "1970-01-01T00:00:00.000Z"}}, None, id="spark-initial-watermark"),
        pytest.param({"job": {"watermark": "2026-11-23T11:59:30Z"}}, 30.0, id="thirty-seconds-behind"),
        pytest.param({"job": {"watermark": "2026-11-23T12:00:05+00:00"}}, 0.0, id="ahead-of-the-clock-is-no-lag"),
        pytest.param({"job": {"watermark": "not a time"}}, None, id="unreadable"),
    ],
)
def test_watermark_lag(status: dict[str, Any], lag: float | None) -> None:
    assert present.watermark_lag(status, NOW) == lag


@pytest.mark.parametrize(
    ("status", "batch"),
    [
        pytest.param({}, None, id="nothing-yet"),
        pytest.param({"job": {"lastBatchId": 7}}, 7, id="started-batch-when-no-checkpoint"),
        pytest.param({"job": {"lastBatchId": 8}, "lastCheckpoint": {"batchId": 7}}, 7, id="committed-batch-wins"),
    ],
)
def test_batch_is_the_committed_one(status: dict[str, Any], batch: int | None) -> None:
    assert present.batch_of(status) == batch


def test_list_table_omits_watermark_lag_when_no_job_has_one() -> None:
    jobs = [job(state="Running", ready=True, lastCheckpoint={"batchId": 12},
                lastSavepoint={"path": "s3://b/sp", "time": "2026-11-23T11:55:00Z", "trigger": "manual"})]
    table = present.list_table(jobs, NOW, all_namespaces=False)
    assert table.columns == ["NAME", "STATE", "READY", "BATCH", "LAST SAVEPOINT", "RESTARTS", "AGE"]
    assert table.rows == [["orders", "Running", "True", "12", "5m", "0", "2h"]]


def test_list_table_shows_watermark_lag_and_namespaces_with_all_namespaces() -> None:
    jobs = [job(state="Running", ready=True, job={"watermark": "2026-11-23T11:59:00Z"}),
            job("clicks", "team-b", state="Deploying")]
    table = present.list_table(jobs, NOW, all_namespaces=True)
    assert table.columns == ["NAMESPACE", "NAME", "STATE", "READY", "BATCH", "WATERMARK LAG", "LAST SAVEPOINT", "RESTARTS", "AGE"]
    assert table.rows == [
        ["team-a", "orders", "Running", "True", "-", "1m", "-", "0", "2h"],
        ["team-b", "clicks", "Deploying", "False", "-", "-", "-", "0", "2h"],
    ]


def test_summary_is_json_and_yaml_for_scripts() -> None:
    value = [present.summary(job(state="Suspended", totalRestarts=2), NOW)]
    assert json.loads(present.dump(value, "json")) == yaml.safe_load(present.dump(value, "yaml")) == [{
        "namespace": "team-a", "name": "orders", "desiredState": "running", "state": "Suspended", "ready": False,
        "batch": None, "watermark": None, "watermarkLagSeconds": None, "lastSavepoint": None,
        "lastSavepointAgeSeconds": None, "restarts": 2, "ageSeconds": 7200.0,
    }]
    with pytest.raises(ValueError, match="-o xml"):
        present.dump(value, "xml")


def test_history_lists_savepoints_newest_first_with_sizes_when_read() -> None:
    history = [
        {"path": "s3://b/sp-2", "batchId": 20, "time": "2026-11-23T11:00:00Z", "trigger": "upgrade"},
        {"path": "s3://b/sp-1", "batchId": 10, "time": "2026-11-22T12:00:00Z", "trigger": "manual"},
    ]
    j = job(savepointHistory=history, lastSavepoint=history[0])
    rows = present.history(j, NOW, {"s3://b/sp-2": 2048, "s3://b/sp-1": None})
    assert [(r["path"], r["batch"], r["trigger"], r["sizeBytes"]) for r in rows] == [
        ("s3://b/sp-2", 20, "upgrade", 2048), ("s3://b/sp-1", 10, "manual", None)]
    assert present.history_table(rows).rows == [
        ["s3://b/sp-2", "20", "upgrade", "1h", "2.0KiB"], ["s3://b/sp-1", "10", "manual", "1d", "-"]]
    assert present.history_table(present.history(j, NOW)).columns == ["PATH", "BATCH", "TRIGGER", "AGE"]


def test_story_is_the_last_events_oldest_first() -> None:
    events = [
        {"type": "Normal", "reason": "SavepointCompleted", "message": "done", "lastTimestamp": "2026-11-23T11:59:00Z"},
        {"type": "Normal", "reason": "DriverCreated", "message": "created", "lastTimestamp": "2026-11-23T11:00:00Z", "count": 2},
        {"type": "Warning", "reason": "DriverFailed", "message": "exit 137", "eventTime": "2026-11-23T11:30:00.000000Z"},
    ]
    events.append({"type": "Normal", "reason": "JobReady", "message": "ready", "lastTimestamp": "2026-11-23T11:59:00Z",
                   "metadata": {"resourceVersion": "90"}})
    events[0]["metadata"] = {"resourceVersion": "100"}
    entries = present.story(events, NOW, limit=3)
    assert [e["reason"] for e in entries] == ["DriverFailed", "JobReady", "SavepointCompleted"]  # same second: write order
    entries = present.story(events, NOW, limit=2)
    assert [e["reason"] for e in entries] == ["JobReady", "SavepointCompleted"]
    assert present.story_table(present.story(events, NOW)).rows[0] == ["1h ago", "Normal", "DriverCreated", "created (x2)"]


def test_status_facts_tell_what_is_going_on() -> None:
    j = job(state="Upgrading", observedGeneration=2, driverPod="orders-driver-3", totalRestarts=1,
            operation={"kind": "upgrade", "phase": "Savepointing", "message": "upgrade savepoint"},
            blockedChange={"reason": "SavepointFailed", "message": "timed out"},
            reconcileError={"reason": "ApiError", "message": "quota", "count": 3})
    facts = dict(present.status_facts(j, NOW))
    assert facts["Name"] == "team-a/orders" and facts["State"] == "Upgrading (desired running)"
    assert facts["Generation"] == "3 (observed 2)" and facts["Driver pod"] == "orders-driver-3"
    assert facts["Operation"] == "upgrade in phase Savepointing: upgrade savepoint"
    assert facts["Blocked change"] == "SavepointFailed: timed out" and facts["Reconcile error"] == "ApiError: quota (x3)"


# ---- --wait rules -------------------------------------------------------------------------

SP_OLD = {"path": "s3://b/old", "trigger": "periodic"}
SP_NEW = {"path": "s3://b/new", "trigger": "manual", "batchId": 9}
SP_OP = {"kind": "savepoint", "phase": "Savepointing"}
FAILED_COND = [{"type": "Savepointing", "status": "False", "reason": "SavepointFailed", "message": "Savepoint s3://b/new failed: boom"}]


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        pytest.param({"lastSavepointNonce": 1, "lastSavepoint": SP_OLD}, waits.Outcome(False), id="nonce-not-seen-yet"),
        pytest.param({"lastSavepointNonce": 2, "operation": SP_OP, "lastSavepoint": SP_OLD}, waits.Outcome(False), id="in-progress"),
        pytest.param({"lastSavepointNonce": 2, "lastSavepoint": SP_NEW}, waits.Outcome(True, True, "s3://b/new"), id="completed"),
        pytest.param({"lastSavepointNonce": 3, "lastSavepoint": SP_NEW}, waits.Outcome(True, True, "s3://b/new"), id="a-later-nonce-counts"),
        pytest.param({"lastSavepointNonce": 2, "lastSavepoint": SP_OLD, "conditions": FAILED_COND},
                     waits.Outcome(True, False, "Savepoint s3://b/new failed: boom"), id="failed"),
        pytest.param({"lastSavepointNonce": 2, "lastSavepoint": SP_OLD, "operation": {"kind": "upgrade", "phase": "Deploying"}},
                     waits.Outcome(False), id="another-operation-first"),
        pytest.param({"lastSavepointNonce": 2, "lastSavepoint": SP_OLD},
                     waits.Outcome(True, False, "the operator took no savepoint (see `kubectl streamjob status`)"), id="none-taken"),
    ],
)
def test_savepoint_wait(status: dict[str, Any], outcome: waits.Outcome) -> None:
    assert waits.savepoint(job(**status), 2, "s3://b/old") == outcome


BLOCKED = {"specHash": "abc", "reason": "SavepointFailed", "message": "The suspend was not done"}


@pytest.mark.parametrize(
    ("status", "before_blocked", "done", "ok"),
    [
        pytest.param({"observedGeneration": 2, "state": "Suspended"}, None, False, False, id="old-generation"),
        pytest.param({"observedGeneration": 3, "state": "Suspending"}, None, False, False, id="suspending"),
        pytest.param({"observedGeneration": 3, "state": "Suspended"}, None, True, True, id="suspended"),
        pytest.param({"observedGeneration": 3, "state": "Running", "blockedChange": BLOCKED}, None, True, False, id="blocked"),
        pytest.param({"observedGeneration": 3, "state": "Running", "blockedChange": BLOCKED}, BLOCKED, False, False,
                     id="an-older-block-is-not-this-one"),
        pytest.param({"observedGeneration": 3, "state": "Failed"}, None, True, False, id="failed"),
    ],
)
def test_suspend_wait(status: dict[str, Any], before_blocked: dict[str, Any] | None, done: bool, ok: bool) -> None:
    outcome = waits.suspended(job(**status), 3, before_blocked)
    assert (outcome.done, outcome.ok) == (done, ok)


@pytest.mark.parametrize(
    ("status", "done", "ok"),
    [
        pytest.param({"observedGeneration": 2, "state": "Running", "ready": True}, False, False, id="old-generation"),
        pytest.param({"observedGeneration": 3, "state": "Deploying"}, False, False, id="deploying"),
        pytest.param({"observedGeneration": 3, "state": "Running", "ready": False}, False, False, id="not-ready"),
        pytest.param({"observedGeneration": 3, "state": "Running", "ready": True}, True, True, id="running"),
        pytest.param({"observedGeneration": 3, "state": "Failed"}, True, False, id="failed"),
    ],
)
def test_resume_wait(status: dict[str, Any], done: bool, ok: bool) -> None:
    outcome = waits.running(job(**status), 3)
    assert (outcome.done, outcome.ok) == (done, ok)


@pytest.mark.parametrize(
    ("status", "done", "ok"),
    [
        pytest.param({"lastRestartNonce": 0, "state": "Running", "ready": True}, False, False, id="nonce-not-seen-yet"),
        pytest.param({"lastRestartNonce": 1, "state": "Restarting", "operation": {"kind": "restart"}}, False, False, id="restarting"),
        pytest.param({"lastRestartNonce": 1, "state": "Running", "ready": True}, True, True, id="running-again"),
        pytest.param({"lastRestartNonce": 1, "state": "Failed"}, True, False, id="failed"),
    ],
)
def test_restart_wait(status: dict[str, Any], done: bool, ok: bool) -> None:
    outcome = waits.restarted(job(**status), 1)
    assert (outcome.done, outcome.ok) == (done, ok)


def test_progress_line_names_the_phase() -> None:
    assert waits.progress(job(state="Running", operation={"kind": "savepoint", "phase": "Savepointing", "message": "manual savepoint"})) \
        == "state Running, savepoint Savepointing (manual savepoint)"
