"""Pod templates merged with the operator's driver pod and Spark's executor pod template (k8s.pods)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamjob_operator.api.spec import SpecError, parse_spec
from streamjob_operator.k8s import pods, resources
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile.changes import ChangeKind, classify
from streamjob_operator.reconcile.decide import hash_text, spec_json
from streamjob_operator.reconcile.model import CreateDriver

OWNER = Owner("wc", "team-a", "uid-1")
COMMON = {
    "metadata": {"labels": {"team": "payments", "streamjob.io/job": "not-ours"}, "annotations": {"example.com/owner": "payments"}},
    "spec": {
        "nodeSelector": {"pool": "streaming"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "imagePullSecrets": [{"name": "mirror"}],
        "securityContext": {"fsGroup": 2000},
        "containers": [
            {"name": "main", "image": "ignored:1", "args": ["ignored"],
             "env": [{"name": "TZ", "value": "UTC"}, {"name": "POD_IP", "value": "spoofed"}],
             "ports": [{"name": "metrics", "containerPort": 9404}, {"name": "control", "containerPort": 1}],
             "resources": {"requests": {"ephemeral-storage": "2Gi", "memory": "1Mi"}},
             "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
            {"name": "log-shipper", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
        ],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    },
}


NODE_LOSS_30 = [{"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
                for taint in ("not-ready", "unreachable")]


def spec(**extra: Any) -> Any:
    return parse_spec({
        "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
        "job": {"entrypoint": "jobs.wordcount:build"},
        "checkpoint": {"location": "s3a://b/ck"},
        "savepoint": {"location": "s3://b/sp"},
        "s3": {"endpoint": "http://s3:9000", "credentialsSecret": {"name": "s3-creds"}},
        "imagePullSecrets": [{"name": "registry"}],
        **extra,
    })


def driver(s: Any) -> dict[str, Any]:
    text = spec_json(s)
    return resources.driver_pod(OWNER, s, CreateDriver("wc-driver-1", 1, text, "s3a://b/ck/run-1", None, hash_text(text)), RuntimeLayout())


def executor(s: Any) -> dict[str, Any]:
    data = resources.job_config_map(OWNER, s, 1)["data"]
    return json.loads(data[resources.EXECUTOR_TEMPLATE_KEY])


def test_without_a_template_driver_and_executors_meet_the_restricted_standard() -> None:
    s = spec(executor={"instances": 2})
    for pod in (driver(s), executor(s)):
        assert pod["spec"]["securityContext"] == pods.POD_SECURITY_DEFAULTS
        assert pod["spec"]["securityContext"]["runAsUser"] == 185 and pod["spec"]["securityContext"]["runAsNonRoot"] is True
        for c in pod["spec"]["containers"]:
            assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert driver(s)["spec"]["containers"][0]["name"] == "driver"
    assert [c["name"] for c in executor(s)["spec"]["containers"]] == ["executor"]


def test_the_template_is_kept_and_the_operator_wins_where_it_must() -> None:
    pod = driver(spec(podTemplate=COMMON))
    meta, body = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "payments" and meta["labels"]["streamjob.io/job"] == "wc"  # ours win
    assert meta["annotations"]["example.com/owner"] == "payments" and meta["annotations"]["streamjob.io/spec-hash"]
    assert meta["annotations"][pods.DEFAULT_CONTAINER_ANNOTATION] == "driver"
    assert body["nodeSelector"] == {"pool": "streaming"}
    assert body["tolerations"] == COMMON["spec"]["tolerations"] + NODE_LOSS_30  # ours for a lost node after the template's
    assert body["affinity"] == COMMON["spec"]["affinity"]
    assert body["restartPolicy"] == "Never" and body["serviceAccountName"] == "wc-driver"
    assert body["imagePullSecrets"] == [{"name": "registry"}, {"name": "mirror"}]
    # the template's pod securityContext over the defaults, key by key
    assert body["securityContext"] == {**pods.POD_SECURITY_DEFAULTS, "fsGroup": 2000}
    main, sidecar = body["containers"]
    assert (main["name"], main["image"], main["command"]) == ("driver", "ghcr.io/streamjob/streamjob-runtime:0.1.0", ["streamjob-runtime"])
    assert main["args"][0] == "run"
    env = {e["name"]: e for e in main["env"]}
    assert env["TZ"] == {"name": "TZ", "value": "UTC"} and "fieldRef" in env["POD_IP"]["valueFrom"]  # ours win by name
    assert [p["name"] for p in main["ports"]] == ["control", "driver-rpc", "blockmanager", "metrics"]
    assert main["resources"]["requests"]["ephemeral-storage"] == "2Gi" and main["resources"]["requests"]["memory"] != "1Mi"
    assert [m["name"] for m in main["volumeMounts"]] == ["streamjob-job", "streamjob-token", "streamjob-tmp", "scratch"]
    assert [v["name"] for v in body["volumes"]] == ["streamjob-job", "streamjob-token", "streamjob-tmp", "scratch"]
    assert sidecar["name"] == "log-shipper" and sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_executors_get_the_template_through_spark_with_their_own_container_named() -> None:
    s = spec(podTemplate=COMMON, executor={"instances": 1})
    pod = executor(s)
    assert pod["metadata"]["labels"]["team"] == "payments"
    assert pod["metadata"]["annotations"][pods.DEFAULT_CONTAINER_ANNOTATION] == "executor"
    assert pod["spec"]["tolerations"] == COMMON["spec"]["tolerations"] and pod["spec"]["nodeSelector"] == {"pool": "streaming"}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["executor", "log-shipper"]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "scratch", "mountPath": "/scratch"}]
    args = driver(s)["spec"]["containers"][0]["args"]
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    assert "spark.kubernetes.executor.podTemplateFile=/etc/streamjob/job/executor-pod.json" in confs
    assert "spark.kubernetes.executor.podTemplateContainerName=executor" in confs
    # no executors, no template file
    none = spec(podTemplate=COMMON, executor={"instances": 0})
    assert resources.EXECUTOR_TEMPLATE_KEY not in resources.job_config_map(OWNER, none, 1)["data"]


def test_role_templates_merge_over_the_common_one() -> None:
    s = spec(
        podTemplate=COMMON,
        driver={"podTemplate": {"metadata": {"labels": {"team": "drivers"}}, "spec": {
            "nodeSelector": {"pool": "on-demand"},
            "tolerations": [{"key": "driver-only", "operator": "Exists"}],
            "containers": [{"name": "main", "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": True}],
                            "securityContext": {"readOnlyRootFilesystem": True}}]}}},
        executor={"instances": 1, "podTemplate": {"spec": {"nodeSelector": {"spot": "true"}}}},
    )
    pod = driver(s)
    assert pod["metadata"]["labels"]["team"] == "drivers"
    assert pod["spec"]["nodeSelector"] == {"pool": "on-demand"}  # maps merge key by key, the role's winning
    assert pod["spec"]["tolerations"] == [{"key": "driver-only", "operator": "Exists"}] + NODE_LOSS_30  # unnamed lists: replaced
    main = pod["spec"]["containers"][0]
    assert main["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/scratch", "readOnly": True}  # named: merged
    assert main["securityContext"] == {**pods.CONTAINER_SECURITY_DEFAULTS, "readOnlyRootFilesystem": True}
    assert [c["name"] for c in pod["spec"]["containers"]] == ["driver", "log-shipper"]
    assert executor(s)["spec"]["nodeSelector"] == {"pool": "streaming", "spot": "true"}


def test_a_template_may_relax_the_defaults_it_owns() -> None:
    pod = driver(spec(podTemplate={"spec": {"securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "Localhost",
                                                                 "localhostProfile": "spark.json"}}}}))
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000 and pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "Localhost", "localhostProfile": "spark.json"}


@pytest.mark.parametrize(("template", "field"), [
    ({"spec": {"containers": [{"image": "x"}]}}, "podTemplate.spec.containers.0.name"),
    ({"metadata": {"name": "x"}}, "podTemplate.metadata.name"),
    ({"spec": {"volumes": [{"name": "Bad_Name"}]}}, "podTemplate.spec.volumes.0.name"),
])
def test_a_malformed_template_is_refused_naming_the_field(template: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        spec(podTemplate=template)


def test_changing_a_template_or_the_pull_secrets_redeploys() -> None:
    old = json.loads(spec_json(spec()))
    new = json.loads(spec_json(spec(podTemplate={"spec": {"nodeSelector": {"pool": "b"}}})))
    assert classify(old, new) == ChangeKind.savepoint_redeploy
    assert classify(old, {**old, "imagePullSecrets": [{"name": "other"}]}) == ChangeKind.savepoint_redeploy


def test_a_driver_leaves_a_lost_node_after_driver_unreachable_seconds_unless_the_template_says_otherwise() -> None:
    assert driver(spec())["spec"]["tolerations"] == NODE_LOSS_30
    assert driver(spec(restartPolicy={"driverUnreachableSeconds": 45}))["spec"]["tolerations"] == [
        {**t, "tolerationSeconds": 45} for t in NODE_LOSS_30]
    assert "tolerations" not in driver(spec(restartPolicy={"driverUnreachableSeconds": 0}))["spec"] or \
        driver(spec(restartPolicy={"driverUnreachableSeconds": 0}))["spec"]["tolerations"] == []  # Kubernetes' 300 s
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}
    tolerations = driver(spec(podTemplate={"spec": {"tolerations": [own]}}))["spec"]["tolerations"]
    assert tolerations == [own, NODE_LOSS_30[0]]  # the template's toleration of a taint wins
    every = {"operator": "Exists"}  # tolerates every taint, for ever: Kubernetes would take our shorter time
    assert driver(spec(podTemplate={"spec": {"tolerations": [every]}}))["spec"]["tolerations"] == [every]


def test_the_replacement_of_a_lost_driver_prefers_any_other_node_keeping_the_templates_affinity() -> None:
    text = spec_json(s := spec(podTemplate={"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["stream"]}]}]}}}}}))
    action = CreateDriver("wc-driver-2", 2, text, "s3a://b/ck/run-1", None, hash_text(text), avoid_node="node-a")
    affinity = resources.driver_pod(OWNER, s, action, RuntimeLayout())["spec"]["affinity"]["nodeAffinity"]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}}]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "pool"
    assert "affinity" not in driver(spec())["spec"]  # no lost node, no affinity of ours
