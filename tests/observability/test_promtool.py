"""What the operator exposes and what the docs and the chart ship, checked by the programs that consume them:
promtool (built by testbed/build/build-prometheus.sh) lints the exposition and the alerting rules; helm renders
the chart's metrics objects. No test bed needed."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml
from prometheus_client import generate_latest

from streamjob_operator import metrics
from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import (
    CheckpointInfo,
    Condition,
    JobMetrics,
    Operation,
    SavepointInfo,
    StorageHygiene,
    StreamJobStatus,
)
from streamjob_operator.reconcile.model import Event
from testbed import locate

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "observability.md"
RULES = REPO / "docs" / "alerts" / "streamjob.rules.yaml"
DASHBOARD = REPO / "charts" / "streamjob" / "dashboards" / "streamjob.json"


def promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(locate.prometheus_bin_dir() / "promtool"), *args], input=stdin, capture_output=True, timeout=60)


def populated_exposition() -> bytes:
    """The exposition after passes that exercised every metric (a job running, a savepoint, an upgrade, a failure)."""
    now = datetime.now(timezone.utc)
    ago = lambda s: (now - timedelta(seconds=s)).isoformat()  # noqa: E731
    status = StreamJobStatus(
        state=LifecycleState.running, ready=True, total_restarts=1,
        conditions=[Condition(type="Ready", status="True", reason="JobReady")],
        last_checkpoint=CheckpointInfo(batch_id=7, time=ago(2)),
        last_savepoint=SavepointInfo(path="s3://b/sp", batch_id=6, time=ago(60), trigger="manual"),
        job=JobMetrics(watermark=ago(15), input_rows_per_second=5.0, processed_rows_per_second=8.0, state_rows=10,
                       state_memory_bytes=2048, rows_dropped_by_watermark=0, late_rows_dropped_total=5, batch_duration_ms=300,
                       storage=StorageHygiene(passes=2, pruned_run_dirs=1, last_error="run-1: AccessDenied")),
    )
    op = Operation(kind="savepoint", phase="Savepointing", trigger="manual", started_at=ago(4))
    metrics.record_pass("promtool", "j", status.model_copy(update={"operation": op, "total_restarts": 0}), status,
                        [Event("Normal", "SavepointCompleted", "ok"), Event("Normal", "UpgradeCompleted", "ok"),
                         Event("Normal", "DriverCreated", "ok")], now)
    try:
        return generate_latest(metrics.REGISTRY)
    finally:
        metrics.forget_job("promtool", "j")


def test_promtool_check_metrics_passes_on_what_the_operator_exposes() -> None:
    exposition = populated_exposition()
    assert b'streamjob_job_watermark_lag_seconds{namespace="promtool",streamjob="j"}' in exposition
    result = promtool("check", "metrics", stdin=exposition)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    assert not (result.stdout + result.stderr).strip(), (result.stdout + result.stderr).decode()


def test_the_alerting_examples_pass_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    rules = sum(len(g["rules"]) for g in yaml.safe_load(RULES.read_text())["groups"])
    assert rules >= 10
    assert f"SUCCESS: {rules} rules found".encode() in result.stdout, result.stdout.decode()


def test_the_alerting_examples_only_use_metrics_the_operator_exports() -> None:
    exported = {row[0] for row in metrics.reference()}
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"\bstreamjob_[a-z_]+", e)}
    assert used and used <= exported, used - exported


def test_the_docs_list_every_metric_the_code_registers() -> None:
    text = DOC.read_text()
    table = text.split("<!-- metrics-reference:start -->\n", 1)[1].split("<!-- metrics-reference:end -->", 1)[0]
    assert table == metrics.reference_markdown(), "docs/observability.md is stale: regenerate the table with python -m streamjob_operator.metrics"


def test_every_dashboard_query_uses_exported_metrics_only() -> None:
    exported = {row[0] for row in metrics.reference()}
    histograms = {row[0] for row in metrics.reference() if row[1] == "histogram"}
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    for expr in exprs:
        for name in re.findall(r"\bstreamjob_[a-z_]+", expr):
            base = name.removesuffix("_bucket")
            assert name in exported or base in histograms, f"{expr}: {name} is not exported"


def test_the_chart_renders_a_metrics_service_and_optionally_a_servicemonitor_and_the_dashboard() -> None:
    helm = str(locate.helm())
    chart = str(REPO / "charts" / "streamjob")

    def render(*sets: str) -> list[dict]:
        out = subprocess.run([helm, "template", "t", chart, "--namespace", "ops", *sets], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    default = render()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in default}
    assert ("Service", "t-streamjob-metrics") in kinds
    assert not any(d["kind"] == "ServiceMonitor" for d in default)
    deployment = next(d for d in default if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-address=$(POD_IP):9090" in container["args"]
    service = next(d for d in default if d["kind"] == "Service" and d["metadata"]["name"] == "t-streamjob-metrics")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()

    full = render("--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.dashboard.enabled=true")
    monitor = next(d for d in full if d["kind"] == "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    dashboard = next(d for d in full if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "t-streamjob-dashboard")
    assert json.loads(dashboard["data"]["streamjob.json"]) == json.loads(DASHBOARD.read_text())

    off = render("--set", "metrics.enabled=false")
    assert not any(d["metadata"]["name"] == "t-streamjob-metrics" for d in off)
    assert not any("--metrics-address" in a for d in off if d["kind"] == "Deployment"
                   for a in d["spec"]["template"]["spec"]["containers"][0]["args"])
