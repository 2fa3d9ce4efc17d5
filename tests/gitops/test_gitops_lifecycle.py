"""Argo CD's health check and kstatus judge real StreamJobs from the test bed, in each lifecycle state.

One job goes through deploy, running, a manual savepoint, an upgrade to an image
that does not exist (Upgrading, then rolled back from its savepoint) and suspend;
a second job whose S3 Secret does not exist never starts a driver and fails
(restartPolicy Never). Each object is captured from the API server as it is in
that state, then health.lua (in gopher-lua) and kstatus (cli-utils) are run on
it. Two Spark driver starts in all. With STREAMJOB_GITOPS_CAPTURE=DIR the
sanitized objects are written there (that is how the captured-*.yaml testdata of
the Argo CD check were made).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gitops_consumers import argo_health, kstatus, sanitized, write_yaml
from streamjob_e2e import DEV_IMAGE, Jobs, Operator, rate_job
from testbed import TestBed

UNKNOWN_IMAGE = "ghcr.io/streamjob/streamjob-runtme:0.1.1"  # a typo: not in the process kubelet's image table

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


def test_argo_health_and_kstatus_follow_a_job_through_its_lifecycle(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, namespace: str, tmp_path: Path,
) -> None:
    assert testbed.s3 is not None
    captured: dict[str, dict[str, Any]] = {}

    def capture(state: str, name: str = "gitops") -> None:
        captured[state] = jobs.get(name)

    # the failing job first: it needs no Spark and fails while the other one starts
    jobs.apply(rate_job("gitops-fail", testbed, prefix=f"e2e/{namespace}/gitops-fail",
                        s3={"credentialsSecret": {"name": "missing-s3-creds"}},
                        rollback={"readinessTimeoutSeconds": 10}, restartPolicy={"type": "Never"}))
    jobs.apply(rate_job("gitops", testbed, prefix=f"e2e/{namespace}/gitops"))
    jobs.wait("gitops", "deploying", lambda st: st.get("state") == "Deploying" and _op(st).get("kind") == "deploy")
    capture("deploying")

    jobs.wait_ready("gitops")
    jobs.wait("gitops", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
    capture("running")

    jobs.patch("gitops", {"savepointNonce": 1})
    jobs.wait("gitops", "a savepoint in progress", lambda st: _op(st).get("kind") == "savepoint", timeout=60)
    capture("savepoint")
    jobs.wait("gitops", "the manual savepoint", lambda st: (st.get("lastSavepoint") or {}).get("trigger") == "manual"
              and st.get("operation") is None)

    jobs.patch("gitops", {"image": UNKNOWN_IMAGE, "rollback": {"readinessTimeoutSeconds": 15}})
    jobs.wait("gitops", "upgrading", lambda st: st.get("state") == "Upgrading" and _op(st).get("kind") == "upgrade", timeout=60)
    capture("upgrading")
    jobs.wait("gitops", "rolled back and running the old spec",
              lambda st: (st.get("blockedChange") or {}).get("reason") == "RolledBack" and st.get("state") == "Running"
              and st.get("ready") is True and st.get("operation") is None, timeout=300)
    capture("rolled-back")

    # the typo reverted and the job suspended in one edit: the spec is met again, suspended
    jobs.patch("gitops", {"image": DEV_IMAGE, "rollback": {"readinessTimeoutSeconds": 300}, "state": "suspended"})
    jobs.wait("gitops", "suspended", lambda st: st.get("state") == "Suspended" and st.get("operation") is None, timeout=180)
    capture("suspended")

    jobs.wait("gitops-fail", "Failed", lambda st: st.get("state") == "Failed", timeout=120)
    capture("failed", "gitops-fail")

    out = Path(os.environ.get("STREAMJOB_GITOPS_CAPTURE") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for state, obj in captured.items():
        files[state] = out / f"captured-{state}.yaml"
        write_yaml(files[state], sanitized(obj, namespace, {testbed.s3.endpoint: "http://s3.streaming.svc:7070"}))
    for state, path in files.items():
        text = path.read_text()
        assert testbed.s3.secret_key not in text and testbed.s3.access_key not in text, f"{path} holds an S3 credential"

    # raw objects (as the API server returned them) and their sanitized testdata must give the same verdicts
    raw = {state: tmp_path / f"raw-{state}.yaml" for state in captured}
    for state, path in raw.items():
        write_yaml(path, captured[state])
    for kind, paths in (("raw", raw), ("testdata", files)):
        argo = dict(zip(paths, argo_health(*paths.values())))
        kst = dict(zip(paths, kstatus(*paths.values())))
        got = {state: (argo[state]["status"], kst[state]["status"]) for state in paths}
        assert got == EXPECTED, (kind, {s: (argo[s], kst[s]) for s in paths})
    # the verdicts say why, in the job's own words
    failed = argo_health(files["failed"])[0]
    assert "missing-s3-creds" in failed["message"], failed
    assert "RolledBack" in argo_health(files["rolled-back"])[0]["message"]
    assert "RestartPolicyExhausted" in kstatus(files["failed"])[0]["message"] or "missing-s3-creds" in kstatus(files["failed"])[0]["message"]

