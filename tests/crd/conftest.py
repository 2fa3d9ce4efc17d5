"""Fixtures for CRD tests: the StreamJob CRD installed in the session's test bed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbed import TestBed, locate
from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def kubectl(bed: TestBed, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(locate.bin_dir() / "kubectl"), f"--kubeconfig={bed.kubeconfig}", *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture(scope="session")
def kubectl_run(session_bed: TestBed):
    """kubectl against the test bed as the admin: kubectl_run(*args, stdin=None, check=True)."""

    def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return kubectl(session_bed, *args, stdin=stdin, check=check)

    return run


@pytest.fixture(scope="session")
def streamjob_crd(session_bed: TestBed) -> Path:
    """Applies crds/ with kubectl (taking the fields over from whoever created them earlier in the session: the e2e
    fixtures create them with the Python client) and waits until the API serves StreamJobs."""
    kubectl(session_bed, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    wait_for(
        lambda: kubectl(session_bed, "get", "streamjobs", "-A", check=False).returncode == 0,
        60,
        "StreamJob CRD established",
    )
    return REPO / "crds"
