"""--max-concurrent-upgrades on the test bed: one change applied to every job rolls out one job at a time.

Two running jobs get the same spec change within milliseconds, under an operator started with
--max-concurrent-upgrades 1. Every version of both StreamJobs that the API server stored is
recorded (JobWatch, in storage order): at no version do both record an upgrade operation, the
job that waited said so (Progressing: UpgradeQueued) while it kept its driver, Running,
and both end on the new spec with a new driver. With the bound off (0) both upgrades start at
once: the operator before the bound fails the first assertion.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed

from streamjob_e2e import Jobs, JobWatch, Operator, rate_job


NAMES = ("slot-a", "slot-b")
CHANGE = {"sparkConf": {"spark.streamjob.e2e.rollout": "2"}}


@pytest.fixture
def one_slot_operator(testbed: TestBed, crd: None, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(testbed, tmp_path / "operator.log", lease=f"streamjob-e2e-{uuid.uuid4().hex[:6]}",
                  extra_args=["--max-concurrent-upgrades", "1"])
    op.start()
    yield op
    op.stop()
    if request.session.testsfailed:
        print(f"--- operator log {op.log_path} (tail) ---\n{op.log()[-6000:]}")


def upgrading(version: dict[str, Any]) -> bool:
    return ((version.get("status") or {}).get("operation") or {}).get("kind") in ("upgrade", "rollback")


def queued(version: dict[str, Any]) -> bool:
    conditions = (version.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Progressing" and c["reason"] == "UpgradeQueued" for c in conditions)


def test_a_change_to_every_job_rolls_out_one_job_at_a_time(
    testbed: TestBed, one_slot_operator: Operator, jobs: Jobs, s3_secret: str, kube_api: client.ApiClient, namespace: str,
) -> None:
    for name in NAMES:
        jobs.apply(rate_job(name, testbed, prefix=f"e2e/{namespace}/{name}"))
    for name in NAMES:
        jobs.wait_ready(name, driverPod=f"{name}-driver-1")

    with JobWatch(kube_api, namespace) as watch:
        since = len(watch.history())
        for name in NAMES:
            jobs.patch(name, CHANGE)
        done = {name: jobs.wait_ready(name, driverPod=f"{name}-driver-2") for name in NAMES}
        history = watch.history()[since:]

    for name, st in done.items():
        assert '"spark.streamjob.e2e.rollout":"2"' in st["lastReconciledSpec"], st["lastReconciledSpec"]
    holding: dict[str, bool] = {}
    most = 0
    for version in history:
        holding[version["metadata"]["name"]] = upgrading(version)
        most = max(most, sum(holding.values()))
    assert most == 1, f"{most} jobs recorded an upgrade at once: {[watch.transitions(n) for n in NAMES]}"

    waited = [name for name in NAMES if any(queued(v) for v in history if v["metadata"]["name"] == name)]
    assert len(waited) == 1, f"jobs that recorded UpgradeQueued: {waited}"
    name = waited[0]
    while_queued = [v["status"] for v in history if v["metadata"]["name"] == name and queued(v)]
    assert {st.get("driverPod") for st in while_queued} == {f"{name}-driver-1"}
    assert all(st.get("state") == "Running" and st.get("operation") is None for st in while_queued)
    assert "UpgradeQueued" in jobs.reasons(name)
