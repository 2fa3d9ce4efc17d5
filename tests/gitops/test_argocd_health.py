"""The Argo CD health check's own tests (health_test.yaml, Argo CD's format), run in gopher-lua as Argo CD runs them.

Every testdata file is a case: the hand-written ones cover what the test bed
does not easily reach (no status yet, an unobserved generation, a finished
query); the captured-*.yaml ones are StreamJobs captured from the test bed by
test_gitops_lifecycle.py. The argocd-cm snippet must carry the same script.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from gitops_consumers import CHECK_DIR, HEALTH_LUA, argo_health, kstatus

CASES = yaml.safe_load((CHECK_DIR / "health_test.yaml").read_text())["tests"]


def test_every_case_of_health_test_yaml_gives_its_status_and_message() -> None:
    paths = [CHECK_DIR / case["inputPath"] for case in CASES]
    got = {Path(r["file"]).name: {"status": r["status"], "message": r["message"]} for r in argo_health(*paths)}
    want = {Path(case["inputPath"]).name: case["healthStatus"] for case in CASES}
    assert got == want


def test_every_testdata_file_is_a_case_and_the_captured_states_are_all_there() -> None:
    files = {p.name for p in (CHECK_DIR / "testdata").glob("*.yaml")}
    assert files == {Path(case["inputPath"]).name for case in CASES}
    statuses = {case["healthStatus"]["status"] for case in CASES if "captured-" in case["inputPath"]}
    assert statuses == {"Healthy", "Progressing", "Degraded", "Suspended"}


def test_the_argocd_cm_snippet_installs_this_script_for_streamjob() -> None:
    snippet = yaml.safe_load((CHECK_DIR.parents[1] / "argocd-cm.yaml").read_text())
    assert snippet["metadata"]["name"] == "argocd-cm"
    assert snippet["data"]["resource.customizations.health.streamjob.io_StreamJob"] == HEALTH_LUA.read_text()


def test_kstatus_reads_a_failed_job_without_stalled_as_in_progress_and_with_it_as_failed() -> None:
    """Why Stalled exists: by kstatus' rules, Ready=False alone is InProgress (Flux would wait out its timeout)."""
    old, new = kstatus(CHECK_DIR / "testdata" / "failed-without-kstatus-conditions.yaml",
                       CHECK_DIR / "testdata" / "captured-failed.yaml")
    assert (old["status"], new["status"]) == ("InProgress", "Failed")
