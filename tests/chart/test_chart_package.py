"""scripts/package-chart.sh makes an installable chart: the packaged .tgz and its index render with helm.

Installs nothing: `helm template` of the .tgz the script wrote, with the values a
real cluster sets (pull secrets, cloud identity annotations, two replicas).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import locate

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "streamjob"
URL = "https://charts.example.com/streamjob"


def helm(*args: str) -> str:
    result = subprocess.run([str(locate.helm()), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("charts")
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "package-chart.sh"), str(out), URL],
        env={**os.environ, "HELM": str(locate.helm())}, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 0, result.stderr
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    tgz = out / f"streamjob-{version}.tgz"
    assert tgz.is_file(), sorted(p.name for p in out.iterdir())
    return tgz


def render(tgz: Path, *sets: str) -> list[dict[str, Any]]:
    args = ["template", "sj", str(tgz), "--namespace", "ops", "--include-crds"]
    for value in sets:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def one(docs: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
             and (namespace is None or d["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} rendered"
    return found[0]


def test_index_lists_the_packaged_version_at_the_repository_url(packaged: Path):
    index = yaml.safe_load((packaged.parent / "index.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    [entry] = index["entries"]["streamjob"]
    assert entry["version"] == chart["version"] and entry["appVersion"] == chart["appVersion"]
    assert entry["urls"] == [f"{URL}/{packaged.name}"]


def test_packaged_chart_renders_with_its_crd_and_no_budget_for_one_replica(packaged: Path):
    docs = render(packaged)
    crd = one(docs, "CustomResourceDefinition", "streamjobs.streamjob.io")
    assert crd == yaml.safe_load((REPO / "crds" / "streamjob.io_streamjobs.yaml").read_text())
    deployment = one(docs, "Deployment", "streamjob-operator")
    assert deployment["spec"]["replicas"] == 1
    assert "imagePullSecrets" not in deployment["spec"]["template"]["spec"]
    assert "annotations" not in one(docs, "ServiceAccount", "streamjob-operator")["metadata"]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def test_values_for_a_real_cluster_reach_the_objects(packaged: Path):
    role = "arn:aws:iam::111122223333:role/streamjob-driver"
    docs = render(
        packaged,
        "replicas=2",
        "imagePullSecrets[0].name=regcred",
        "serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=operator@project.iam.gserviceaccount.com",
        f"driverServiceAccount.annotations.eks\\.amazonaws\\.com/role-arn={role}",
        "watchNamespaces={jobs}",
        "podLabels.azure\\.workload\\.identity/use=true",
    )
    deployment = one(docs, "Deployment", "streamjob-operator")
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert one(docs, "ServiceAccount", "streamjob-operator")["metadata"]["annotations"] == {
        "iam.gke.io/gcp-service-account": "operator@project.iam.gserviceaccount.com"}
    driver_sa = one(docs, "ServiceAccount", "streamjob-driver", "jobs")
    assert driver_sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}
    budget = one(docs, "PodDisruptionBudget", "streamjob-operator")
    assert budget["spec"]["maxUnavailable"] == 1
    selector = budget["spec"]["selector"]["matchLabels"]
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()


def test_budget_can_be_switched_off(packaged: Path):
    docs = render(packaged, "replicas=2", "podDisruptionBudget.enabled=false")
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]


def s3_limits_of(docs: list[dict[str, Any]]) -> Any:
    """The operator's S3 settings as its own parser reads the rendered Deployment's args."""
    from streamjob_operator.main import build_parser

    [container] = one(docs, "Deployment", "streamjob-operator")["spec"]["template"]["spec"]["containers"]
    return build_parser().parse_args([a for a in container["args"] if a.startswith("--s3-")])


def test_s3_values_reach_the_operator_and_lend_no_identity_by_default(packaged: Path):
    default = s3_limits_of(render(packaged))
    assert not default.s3_ambient_credentials
    assert (default.s3_connect_timeout_seconds, default.s3_read_timeout_seconds, default.s3_max_attempts) == (3, 10, 2)
    tuned = s3_limits_of(render(packaged, "s3.ambientCredentials=true", "s3.readTimeoutSeconds=4", "s3.unresponsiveSeconds=30"))
    assert tuned.s3_ambient_credentials and tuned.s3_read_timeout_seconds == 4 and tuned.s3_unresponsive_seconds == 30
