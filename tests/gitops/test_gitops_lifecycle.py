"""Argo CD's health check and kstatus judge real StreamJobs from the test bed, in each lifecycle state.

One job goes through deploy, running, a manual savepoint, an upgrade to an image
that does not exist (Upgrading, then rolled back from its savepoint) and suspend;
a second job whose S3 Secret does not exist never starts a driver and fails
(restartPolicy Never). A watch records every version of the jobs the API server
stores (streamjob_e2e.JobWatch); the test waits only for states that last (Ready,
the savepoint recorded, rolled back, Suspended, Failed) and takes the transient
ones (Deploying, the savepoint in progress, Upgrading) from that record, however
briefly they lasted: the operator writes each to status before acting on it.
health.lua (in gopher-lua) and kstatus (cli-utils) are run on every recorded
version in each state. Two Spark driver starts in all. With
STREAMJOB_GITOPS_CAPTURE=DIR one sanitized object per state is written there
(that is how the captured-*.yaml testdata of the Argo CD check were made).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from kubernetes import client

from streamjob_contract.lifecycle import LifecycleState
from streamjob_operator.api.status import OpKind

from gitops_consumers import argo_health, kstatus, sanitized, write_yaml
from streamjob_e2e import DEV_IMAGE, Jobs, JobWatch, Operator, rate_job
from testbed import TestBed


UNKNOWN_IMAGE = "ghcr.io/streamjob/streamjob-runtme:0.1.1"  # a typo: an image no store has

# state captured -> (Argo CD health, kstatus)
EXPECTED = {
    "deploying": ("Progressing", "InProgress"),
    "running": ("Healthy", "Current"),
    "savepoint": ("Progressing", "InProgress"),
    "upgrading": ("Progressing", "InProgress"),
    "rolled-back": ("Degraded", "Failed"),
    "suspended": ("Suspended", "Current"),
    "failed": ("Degraded", "Failed"),
}


def _op(st: dict[str, Any]) -> dict[str, Any]:
    return st.get("operation") or {}


def _in(state: LifecycleState, kind: OpKind | None) -> Callable[[dict[str, Any]], bool]:
    return lambda st: st.get("state") == state and _op(st).get("kind") == kind


def _is_subsequence(want: list[Any], got: list[Any]) -> bool:
    it = iter(got)
    return all(any(w == g for g in it) for w in want)


def test_argo_health_and_kstatus_follow_a_job_through_its_lifecycle(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, namespace: str, tmp_path: Path,
    kube_api: client.ApiClient,
) -> None:
    assert testbed.s3 is not None
    # every version recorded in each state; the last of the stable ones is the one read after waiting for it
    captured: dict[str, list[dict[str, Any]]] = {}

    with JobWatch(kube_api, namespace) as history:
        # the failing job first: it needs no Spark and fails while the other one starts
        jobs.apply(rate_job("gitops-fail", testbed, prefix=f"e2e/{namespace}/gitops-fail",
                            s3={"credentialsSecret": {"name": "missing-s3-creds"}},
                            rollback={"readinessTimeoutSeconds": 10}, restartPolicy={"type": "Never"}))
        jobs.apply(rate_job("gitops", testbed, prefix=f"e2e/{namespace}/gitops"))
        jobs.wait_ready("gitops")
        jobs.wait("gitops", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
        captured["running"] = [jobs.get("gitops")]
        captured["deploying"] = history.recorded("gitops", "in Deploying (deploy)", _in(LifecycleState.deploying, OpKind.deploy))

        jobs.patch("gitops", {"savepointNonce": 1})
        jobs.wait("gitops", "the manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual"
                  and st.get("operation") is None)
        captured["savepoint"] = history.recorded("gitops", "with a savepoint in progress", _in(LifecycleState.running, OpKind.savepoint))

        jobs.patch("gitops", {"image": UNKNOWN_IMAGE, "rollback": {"readinessTimeoutSeconds": 15}})
        jobs.wait("gitops", "rolled back and running the old spec",
                  lambda st: (st.get("blockedChange") or {}).get("reason") == "RolledBack" and st.get("state") == LifecycleState.running
                  and st.get("ready") is True and st.get("operation") is None, timeout=300)
        captured["rolled-back"] = [jobs.get("gitops")]
        captured["upgrading"] = history.recorded("gitops", "in Upgrading (upgrade)", _in(LifecycleState.upgrading, OpKind.upgrade))

        # the typo reverted and the job suspended in one edit: the spec is met again, suspended
        jobs.patch("gitops", {"image": DEV_IMAGE, "rollback": {"readinessTimeoutSeconds": 300}, "state": "suspended"})
        jobs.wait("gitops", "suspended", lambda st: st.get("state") == LifecycleState.suspended and st.get("operation") is None, timeout=180)
        captured["suspended"] = [jobs.get("gitops")]

        jobs.wait("gitops-fail", "Failed", lambda st: st.get("state") == LifecycleState.failed, timeout=120)
        captured["failed"] = [jobs.get("gitops-fail")]

        # the recorded history: each state in the order the lifecycle goes through them
        lifecycle = [(LifecycleState.deploying, OpKind.deploy), (LifecycleState.running, None),
                     (LifecycleState.running, OpKind.savepoint), (LifecycleState.running, None),
                     (LifecycleState.upgrading, OpKind.upgrade), (LifecycleState.rolling_back, OpKind.rollback),
                     (LifecycleState.running, None), (LifecycleState.suspended, None)]
        history.recorded("gitops", "Suspended", _in(LifecycleState.suspended, None))  # the watch has caught up with the last wait
        assert _is_subsequence(lifecycle, history.transitions("gitops")), history.transitions("gitops")
        assert history.transitions("gitops-fail")[-1] == (LifecycleState.failed, None), history.transitions("gitops-fail")
    # the events of each step; the last one is posted after the status write that the wait above saw
    jobs.wait_event("gitops", "Suspended")
    assert {"Deploying", "DriverCreated", "Savepointing", "SavepointCompleted", "Upgrading", "RollingBack",
            "RolledBack", "Suspending"} <= set(jobs.reasons("gitops")), jobs.events("gitops")

    out = Path(os.environ.get("STREAMJOB_GITOPS_CAPTURE") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for state, objs in captured.items():  # the testdata: the first version recorded in each state
        files[state] = out / f"captured-{state}.yaml"
        write_yaml(files[state], sanitized(objs[0], namespace, {testbed.s3_endpoint_for_pods_and_host(): "http://s3.streaming.svc:7070"}))
    for state, path in files.items():
        text = path.read_text()
        assert testbed.s3.secret_key not in text and testbed.s3.access_key not in text, f"{path} holds an S3 credential"

    # raw objects (every version as the API server returned it) and their sanitized testdata must give the same verdicts
    raw = {(state, n): tmp_path / f"raw-{state}-{n}.yaml" for state, objs in captured.items() for n in range(len(objs))}
    for (state, n), path in raw.items():
        write_yaml(path, captured[state][n])
    for kind, paths in (("raw", raw), ("testdata", {(state, 0): path for state, path in files.items()})):
        argo = argo_health(*paths.values())
        kst = kstatus(*paths.values())
        got = {key: (a["status"], k["status"]) for key, a, k in zip(paths, argo, kst)}
        wrong = {key: (verdict, a, k) for (key, verdict), a, k in zip(got.items(), argo, kst) if verdict != EXPECTED[key[0]]}
        assert not wrong, (kind, wrong)
        assert {state for state, _ in got} == set(EXPECTED), (kind, sorted(got))
    # the verdicts say why, in the job's own words
    failed = argo_health(files["failed"])[0]
    assert "missing-s3-creds" in failed["message"], failed
    assert "RolledBack" in argo_health(files["rolled-back"])[0]["message"]
    assert "RestartPolicyExhausted" in kstatus(files["failed"])[0]["message"] or "missing-s3-creds" in kstatus(files["failed"])[0]["message"]
