"""The pure builders of the objects a StreamJob owns."""

from __future__ import annotations

import pytest

from streamjob_operator.api.spec import SpecError, parse_spec
from streamjob_operator.k8s import resources
from streamjob_operator.k8s.resources import Owner, RuntimeLayout
from streamjob_operator.reconcile.decide import hash_text, spec_json
from streamjob_operator.reconcile.model import CreateDriver

OWNER = Owner("wc", "team-a", "uid-1")
SPEC = parse_spec({
    "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0",
    "job": {"entrypoint": "jobs.wordcount:build"},
    "checkpoint": {"location": "s3a://b/ck"},
    "savepoint": {"location": "s3://b/sp"},
    "s3": {"endpoint": "http://s3:9000", "pathStyleAccess": True, "credentialsSecret": {"name": "s3-creds"}},
    "executor": {"instances": 2},
    "sparkConf": {"spark.kubernetes.driver.pod.name": "user-tries-to-override"},
})
TEXT = spec_json(SPEC)
ACTION = CreateDriver("wc-driver-3", 3, TEXT, "s3a://b/ck/run-3", "s3://b/sp/team-a/wc/savepoint-x", hash_text(TEXT))


def test_driver_pod_runs_the_runtime_as_main_process_with_a_client_mode_driver() -> None:
    pod = resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout())
    container = pod["spec"]["containers"][0]
    args = container["args"]
    # the runtime is PID 1, so SIGTERM reaches it and it stops the query cleanly (exit 11, not 143)
    assert container["command"] == ["streamjob-runtime"]
    assert args[args.index("--master") + 1] == "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    assert "spark.kubernetes.driver.pod.name=wc-driver-3" == [c for c in confs if c.startswith("spark.kubernetes.driver.pod.name=")][-1]
    assert "spark.driver.host=$(POD_IP)" in confs and "spark.executor.instances=2" in confs
    assert "spark.kubernetes.namespace=team-a" in confs
    assert "spark.submit.deployMode=client" in confs and "spark.driver.memory=1g" in confs
    runtime = args
    assert runtime[0] == "run"
    assert runtime[runtime.index("--checkpoint") + 1] == "s3a://b/ck/run-3"
    assert runtime[runtime.index("--restore-from") + 1] == "s3://b/sp/team-a/wc/savepoint-x"
    # the savepoint timeout lets the driver prune this job's abandoned savepoint directories (storage hygiene)
    assert runtime[runtime.index("--savepoint-location") + 1 : runtime.index("--savepoint-location") + 4] == [
        "s3://b/sp", "--savepoint-timeout-seconds", "600"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert pod["metadata"]["labels"]["streamjob.io/role"] == "driver"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_a_standby_driver_waits_for_its_release_and_restores_nothing_on_its_own() -> None:
    standby = CreateDriver("wc-driver-4", 4, TEXT, "s3a://b/ck/run-4", None, hash_text(TEXT), standby=True, keep_epoch=3)
    args = resources.driver_pod(OWNER, SPEC, standby, RuntimeLayout())["spec"]["containers"][0]["args"]
    assert "--standby" in args and "--restore-from" not in args  # the savepoint comes with POST /release
    assert args[args.index("--checkpoint") + 1] == "s3a://b/ck/run-4"
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    # its executors are its own: named after the standby pod, not after the running driver
    assert "spark.kubernetes.executor.podNamePrefix=wc-driver-4" in confs
    assert "--standby" not in resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout())["spec"]["containers"][0]["args"]


def test_credentials_only_travel_as_secret_references() -> None:
    pod = resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout())
    text = resources.pretty(pod)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}
    assert "spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY=s3-creds:AWS_SECRET_ACCESS_KEY" in text
    assert "fs.s3a.secret.key" not in text


def test_kafka_sasl_credentials_reach_the_driver_only_as_secret_key_references() -> None:
    sasl = {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-creds", "passwordKey": "pw"}}
    spec = parse_spec({**SPEC.model_dump(mode="json", by_alias=True, exclude_none=True), "job": {
        "entrypoint": "jobs.kafka:build",
        "sources": [{"name": "events", "kind": "kafka", "sasl": sasl,
                     "options": {"kafka.bootstrap.servers": "kafka:9093", "subscribe": "events"}}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": "kafka:9093", "topic": "out", "sasl": sasl}},
    }})
    pod = resources.driver_pod(OWNER, spec, ACTION, RuntimeLayout())
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    for stem in ("STREAMJOB_KAFKA_SOURCE_EVENTS", "STREAMJOB_KAFKA_SINK"):
        assert env[f"{stem}_USERNAME"] == {"name": f"{stem}_USERNAME",
                                           "valueFrom": {"secretKeyRef": {"name": "kafka-creds", "key": "username"}}}
        assert env[f"{stem}_PASSWORD"] == {"name": f"{stem}_PASSWORD",
                                           "valueFrom": {"secretKeyRef": {"name": "kafka-creds", "key": "pw"}}}
    assert not [e for e in env.values() if e["name"].startswith("STREAMJOB_KAFKA") and "value" in e]
    # the driver reads no Secret itself: the kubelet resolves the references, the Role stays as it is
    assert "secrets" not in resources.pretty(resources.driver_role(OWNER))
    assert "jaas" not in resources.pretty(pod)


def test_executors_producing_get_the_sinks_sasl_credentials_by_reference_and_only_then() -> None:
    sasl = {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-creds", "passwordKey": "pw"}}

    def confs(producers: str) -> list[str]:
        spec = parse_spec({**SPEC.model_dump(mode="json", by_alias=True, exclude_none=True), "job": {
            "entrypoint": "jobs.kafka:build",
            "sink": {"kind": "kafka", "kafka": {"bootstrapServers": "kafka:9093", "topic": "out", "sasl": sasl, "producers": producers}},
        }})
        args = resources.driver_pod(OWNER, spec, ACTION, RuntimeLayout())["spec"]["containers"][0]["args"]
        return [args[i + 1] for i, a in enumerate(args) if a == "--conf" and "STREAMJOB_KAFKA" in args[i + 1]]

    assert confs("executors") == [
        "spark.kubernetes.executor.secretKeyRef.STREAMJOB_KAFKA_SINK_USERNAME=kafka-creds:username",
        "spark.kubernetes.executor.secretKeyRef.STREAMJOB_KAFKA_SINK_PASSWORD=kafka-creds:pw",
    ]
    assert confs("driver") == []  # the executors of a driver-producing sink never see the sink's credentials


def test_driver_role_is_namespaced_and_least_privilege() -> None:
    role = resources.driver_role(OWNER)
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "deletecollection"]},
    ]
    assert "spark.kubernetes.driver.ownPersistentVolumeClaim=false" in resources.pretty(resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout()))
    binding = resources.driver_role_binding(OWNER)
    assert binding["subjects"][0]["name"] == resources.service_account_of(OWNER, SPEC)


def test_job_config_map_holds_the_job_definition_per_epoch() -> None:
    cm = resources.job_config_map(OWNER, SPEC, 3)
    assert cm["metadata"]["name"] == "wc-job-3"
    assert '"entrypoint":"jobs.wordcount:build"' in cm["data"]["job.json"]


def test_service_is_headless_and_selects_the_driver() -> None:
    svc = resources.driver_service(OWNER, RuntimeLayout())
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"streamjob.io/job": "wc", "streamjob.io/role": "driver"}


def test_zero_executors_run_the_tasks_in_the_driver() -> None:
    spec = SPEC.model_copy(update={"executor": SPEC.executor.model_copy(update={"instances": 0})})
    args = resources.driver_pod(OWNER, spec, ACTION, RuntimeLayout())["spec"]["containers"][0]["args"]
    assert args[args.index("--master") + 1] == "local[1]"
    assert not [a for a in args if a.startswith("spark.executor.instances")]


def test_core_request_sets_the_pods_cpu_request_and_leaves_the_task_slots_to_cores() -> None:
    spec = parse_spec({**SPEC.model_dump(by_alias=True, exclude_none=True),
                       "driver": {"cores": 2, "coreRequest": "500m"},
                       "executor": {"instances": 2, "cores": 4, "coreRequest": "1.5"}})
    container = resources.driver_pod(OWNER, spec, ACTION, RuntimeLayout())["spec"]["containers"][0]
    confs = [container["args"][i + 1] for i, a in enumerate(container["args"]) if a == "--conf"]

    assert container["resources"]["requests"]["cpu"] == "500m"
    assert "spark.kubernetes.executor.request.cores=1.5" in confs and "spark.executor.cores=4" in confs
    # unset: the request is the cores, and Spark's own default decides the executors'
    plain = resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout())["spec"]["containers"][0]
    assert plain["resources"]["requests"]["cpu"] == "1"
    assert not [a for a in plain["args"] if a.startswith("spark.kubernetes.executor.request.cores")]


def test_core_request_takes_kubernetes_cpu_quantities_only() -> None:
    for good in ("250m", "0.5", "2", "1.125"):
        assert parse_spec({**SPEC.model_dump(by_alias=True, exclude_none=True), "driver": {"coreRequest": good}}).driver.core_request == good
    for bad in ("half", "1.2345", "-1", "500M", ""):
        with pytest.raises(SpecError, match="spec.driver.coreRequest"):
            parse_spec({**SPEC.model_dump(by_alias=True, exclude_none=True), "driver": {"coreRequest": bad}})


def test_a_brokers_ca_secret_is_mounted_in_the_driver_and_the_executors_where_the_runtime_reads_it() -> None:
    ca = {"name": "strimzi-cluster-ca-cert"}
    sasl = {"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-creds"}, "caSecretRef": ca}
    spec = parse_spec({**SPEC.model_dump(mode="json", by_alias=True, exclude_none=True), "job": {
        "entrypoint": "jobs.kafka:build",
        "sources": [{"name": "events", "kind": "kafka", "sasl": sasl,
                     "options": {"kafka.bootstrap.servers": "kafka:9093", "subscribe": "events"}}],
        "sink": {"kind": "kafka", "kafka": {"bootstrapServers": "kafka:9093", "topic": "out",
                                             "sasl": {**sasl, "caSecretRef": {**ca, "key": "other.pem"}}}},
    }})
    volume = {"name": "streamjob-kafka-ca-0", "secret": {"secretName": "strimzi-cluster-ca-cert", "defaultMode": 0o444,
                                                        "items": [{"key": "ca.crt", "path": "ca.crt"},
                                                                  {"key": "other.pem", "path": "other.pem"}]}}
    mount = {"name": "streamjob-kafka-ca-0", "mountPath": "/etc/streamjob/kafka-ca/strimzi-cluster-ca-cert", "readOnly": True}

    pod = resources.driver_pod(OWNER, spec, ACTION, RuntimeLayout())
    assert volume in pod["spec"]["volumes"] and mount in pod["spec"]["containers"][0]["volumeMounts"]
    template = resources.executor_pod_template(spec)
    assert volume in template["spec"]["volumes"] and mount in template["spec"]["containers"][0]["volumeMounts"]
    # a job without one mounts nothing more
    assert not [v for v in resources.driver_pod(OWNER, SPEC, ACTION, RuntimeLayout())["spec"]["volumes"]
                if v["name"].startswith("streamjob-kafka-ca")]
