"""The chart's NetworkPolicy lets only the operator reach a driver's control port.

`helm template` renders the chart; the policy is checked against what the
operator really builds (the driver pod of operator/k8s/resources.py, the
operator pod of the chart's Deployment) and created on the test bed's real API
server, which validates it. The test bed has no network plugin that enforces
NetworkPolicy, so no traffic is tried here (docs/operations.md says so).
"""

from __future__ import annotations

import subprocess
from typing import Any

import yaml
from kubernetes import client
from streamjob_e2e import REPO

from streamjob_operator.api.spec import parse_spec
from streamjob_operator.k8s import resources
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile.decide import hash_text, spec_json
from streamjob_operator.reconcile.model import CreateDriver
from testbed import locate

CHART = REPO / "charts" / "streamjob"


def render(*sets: str, namespace: str = "ops") -> list[dict[str, Any]]:
    args = [str(locate.helm()), "template", "sj", str(CHART), "--namespace", namespace]
    for value in sets:
        args += ["--set", value]
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}, selector
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def driver_pod() -> dict[str, Any]:
    """The driver pod manifest the operator builds for a job with executors."""
    spec = parse_spec({
        "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
        "job": {"entrypoint": "jobs.wordcount:build"},
        "checkpoint": {"location": "file:///ck"},
        "executor": {"instances": 1},
    })
    text = spec_json(spec)
    action = CreateDriver("wc-driver-1", 1, text, "file:///ck/run-1", None, hash_text(text))
    return resources.driver_pod(Owner("wc", "team-a", "uid-1"), spec, action, RuntimeLayout())


def test_the_policy_admits_only_the_operator_to_the_control_port(kube_api: client.ApiClient, namespace: str) -> None:
    docs = render(f"watchNamespaces={{{namespace},other}}")
    rendered = policies(docs)
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in rendered] == [
        (namespace, "streamjob-operator-drivers"), ("other", "streamjob-operator-drivers")
    ]
    policy = rendered[0]
    pod = driver_pod()
    assert matches(policy["spec"]["podSelector"], pod["metadata"]["labels"]), "the policy does not select driver pods"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}

    operator = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["metadata"]["labels"]
    by_port: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in port_names, f"port {port['port']} is not a port of the driver pod ({port_names})"
            by_port.setdefault(port["port"], []).extend(rule["from"])
    assert set(by_port) == port_names, "every driver port has a rule, and no other"
    (control,) = by_port["control"]
    assert control["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}
    assert matches(control["podSelector"], operator), "the operator pods are not the ones admitted"
    assert not matches(control["podSelector"], pod["metadata"]["labels"]), "drivers may reach each other's control port"
    for spark_port in ("driver-rpc", "blockmanager"):
        assert by_port[spark_port] == [{"podSelector": {}}], "Spark's ports are open to the job's namespace only"

    # the real API server accepts it as rendered (it validates the schema and the named ports)
    networking = client.NetworkingV1Api(kube_api)
    created = networking.create_namespaced_network_policy(namespace, policy)
    assert created.spec.pod_selector.match_labels == policy["spec"]["podSelector"]["matchLabels"]
    networking.delete_namespaced_network_policy(created.metadata.name, namespace)


def test_the_policy_follows_the_toggle_and_the_namespaces() -> None:
    assert policies(render("networkPolicy.enabled=false")) == []
    assert [p["metadata"]["namespace"] for p in policies(render(namespace="ops"))] == ["ops"]
    assert [p["metadata"]["namespace"] for p in policies(render("watchNamespaces={a}", "networkPolicy.namespaces={b,c}"))] == ["b", "c"]
    extra = policies(render("networkPolicy.extraIngress[0].ports[0].port=4040"))[0]["spec"]["ingress"]
    assert extra[-1] == {"ports": [{"port": 4040}]}
