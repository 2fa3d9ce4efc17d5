"""The real programs GitOps tools judge a StreamJob with, run on objects in files.

- ``argo_health``: the Argo CD health check (gitops/argocd/streamjob.io/StreamJob/health.lua)
  run by gopher-lua, Argo CD's interpreter (testbed/build/gitops-tools/lua-health);
- ``kstatus``: sigs.k8s.io/cli-utils' status.Compute, what Flux waits on
  (testbed/build/gitops-tools/kstatus).

Both are built by testbed/build/build-gitops-tools.sh (scripts/bootstrap.sh) into
$STREAMJOB_GITOPS_BIN_DIR. Used by the tests in tests/gitops.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from testbed import locate

ROOT = Path(__file__).resolve().parents[2]
CHECK_DIR = ROOT / "gitops" / "argocd" / "streamjob.io" / "StreamJob"
HEALTH_LUA = CHECK_DIR / "health.lua"


def tool(name: str) -> str:
    bin_dir = os.environ.get("STREAMJOB_GITOPS_BIN_DIR")
    assert bin_dir, "STREAMJOB_GITOPS_BIN_DIR is not set: run scripts/bootstrap.sh and source .streamjob-env"
    path = Path(bin_dir) / name
    if not path.is_file():
        locate.await_compiled(path)  # a cold machine's first run builds them beside the tests
    assert path.is_file(), f"{path} is missing: run testbed/build/build-gitops-tools.sh"
    return str(path)


def _run(argv: list[str]) -> list[dict[str, str]]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{argv[0]} failed (exit {out.returncode}): {out.stderr}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def argo_health(*paths: Path) -> list[dict[str, str]]:
    """[{file, status, message}] as Argo CD's health.lua computes it for each object file."""
    return _run([tool("lua-health"), str(HEALTH_LUA), *map(str, paths)])


def kstatus(*paths: Path) -> list[dict[str, str]]:
    """[{file, status, message}] as kstatus computes it (Current, InProgress, Failed, Terminating)."""
    return _run([tool("kstatus"), *map(str, paths)])


def sanitized(obj: dict[str, Any], namespace: str, replace: dict[str, str]) -> dict[str, Any]:
    """A captured StreamJob fit for testdata: server bookkeeping dropped, test bed names and endpoints replaced."""
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    obj["metadata"] = {"name": meta["name"], "namespace": "streaming", "generation": meta.get("generation")}
    if meta.get("deletionTimestamp"):
        obj["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
    text = json.dumps(obj)
    for old, new in {namespace: "streaming", **replace}.items():
        text = text.replace(old, new)
    return dict(json.loads(text))


def write_yaml(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(obj, sort_keys=False, width=120))
