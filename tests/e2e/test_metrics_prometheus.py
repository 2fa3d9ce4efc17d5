"""A real Prometheus scrapes the operator through one job's life; every query of the Grafana dashboard returns data.

Prometheus (testbed/build/build-prometheus.sh) listens on 127.0.0.1 with its own
data dir and scrapes the operator's 127.0.0.1 metrics port every second, while
one windowed job (event time, a watermark, state) is deployed, has its driver
killed, takes a manual savepoint and is upgraded: three driver starts.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import TestBed, locate
from testbed.proc import free_port
from testbed.waiting import wait_for

from streamjob_e2e import DEV_IMAGE, Jobs, Operator, kill_driver_process, rate_job


REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "charts" / "streamjob" / "dashboards" / "streamjob.json"


class Prometheus:
    def __init__(self, target: str, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            f"- job_name: streamjob-operator\n  static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = workdir / "prometheus.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(locate.prometheus_bin_dir() / "prometheus"), f"--config.file={config}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def api(self, path: str, **params: str) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}", timeout=10) as reply:
            body = json.load(reply)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        return list(data["result"]) if data["resultType"] == "vector" else [data["result"]]

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, f"{expr}: {result}"
        return float(result[0]["value"][1])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def scraped_operator(testbed: TestBed, crd: None, tmp_path: Path) -> Iterator[tuple[Operator, Prometheus]]:
    address = f"127.0.0.1:{free_port()}"
    op = Operator(testbed, tmp_path / "operator.log", lease=f"streamjob-e2e-{uuid.uuid4().hex[:6]}",
                  extra_args=["--metrics-address", address])
    op.start()
    (tmp_path / "prom").mkdir()
    prom = Prometheus(address, tmp_path / "prom")
    try:
        yield op, prom
    finally:
        prom.stop()
        op.stop()


def windowed_job(name: str, testbed: TestBed, prefix: str) -> dict[str, Any]:
    return rate_job(name, testbed, prefix=prefix, job={"pipeline": {
        "sources": [{"name": "ticks", "kind": "rate", "options": {"rowsPerSecond": "5"},
                     "eventTime": {"column": "timestamp", "watermarkDelay": "2 seconds"}}],
        "transforms": [{"name": "per_window", "sql": "SELECT window.start AS window_start, count(*) AS n "
                                                      "FROM ticks GROUP BY window(timestamp, '4 seconds')"}],
        "sink": {"kind": "files", "format": "json", "path": f"s3a://streamjob/{prefix}/output"},
    }})


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"].replace("$namespace", ".*") for p in panels for t in p["targets"]]


def test_prometheus_scrapes_the_operator_through_a_lifecycle_and_every_dashboard_query_returns_data(
    testbed: TestBed, scraped_operator: tuple[Operator, Prometheus], jobs: Jobs, s3_secret: str, namespace: str,
) -> None:
    op, prom = scraped_operator
    sel = f'namespace="{namespace}",streamjob="watched"'
    jobs.apply(windowed_job("watched", testbed, prefix=f"e2e/{namespace}/metrics"))

    # deploy: the target is up and the job's series carry progress and a watermark
    jobs.wait_ready("watched")
    jobs.wait("watched", "a watermark past the epoch and two committed batches",
              lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 2
              and not str((st.get("job") or {}).get("watermark") or "1970").startswith("1970"))
    wait_for(lambda: prom.query(f"streamjob_job_watermark_lag_seconds{{{sel}}}"), 60, "watermark lag scraped")
    assert prom.value('up{job="streamjob-operator"}') == 1
    first_batch = prom.value(f"streamjob_job_last_committed_batch_id{{{sel}}}")

    # a driver failure: restart counted, replacement timed
    kill_driver_process(testbed, namespace, "watched-driver-1")
    jobs.wait_ready("watched", driverPod="watched-driver-2")

    # a manual savepoint, then an upgrade (its own savepoint)
    jobs.patch("watched", {"savepointNonce": 1})
    jobs.wait("watched", "a manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual")
    jobs.patch("watched", {"image": DEV_IMAGE.replace("0.1.0", "0.1.1")})
    jobs.wait_ready("watched", driverPod="watched-driver-3")
    jobs.wait_event("watched", "UpgradeCompleted")  # posted after the status write that wait_ready saw
    jobs.wait("watched", "a batch after the upgrade", lambda st: st["lastCheckpoint"]["batchId"] > first_batch + 1)

    # what the passes counted reaches Prometheus
    wait_for(lambda: prom.query('streamjob_upgrades_total >= 1') and prom.query(f"streamjob_job_restarts{{{sel}}} >= 1")
             and prom.query(f"streamjob_job_last_committed_batch_id{{{sel}}} > {first_batch}"), 60, "the upgrade scraped")
    assert prom.value('streamjob_savepoints_total{trigger="manual",outcome="completed"}') >= 1
    assert prom.value('streamjob_savepoints_total{trigger="upgrade",outcome="completed"}') >= 1
    assert prom.value("streamjob_restarts_total") >= 1
    assert prom.value("streamjob_failure_reaction_seconds_count") >= 1
    assert prom.value("streamjob_leader") == 1
    assert prom.value(f'streamjob_job_state{{{sel},state="Running"}}') == 1
    assert prom.value(f"max_over_time(streamjob_job_last_committed_batch_id{{{sel}}}[10m])") > first_batch
    assert prom.value(f"streamjob_job_watermark_lag_seconds{{{sel}}}") >= 0
    assert len(prom.query(f"streamjob_job_state_rows{{{sel}}}")) == 1, "the job's state rows not scraped"

    empty = [expr for expr in dashboard_queries() if not prom.query(expr)]
    assert not empty, f"dashboard queries without data: {empty}"

    # deletion: the job's series go (bounded cardinality over the operator's life)
    jobs.delete("watched")
    wait_for(lambda: not prom.query(f'{{__name__=~"streamjob_job_.*",{sel}}}'), 240, "the deleted job's series gone")
    assert not prom.query('streamjob_jobs{state="Running"} > 0')
