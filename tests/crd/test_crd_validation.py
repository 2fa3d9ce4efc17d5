"""The real API server accepts the examples and refuses bad StreamJobs at apply time.

Every refusal must name the offending field, so a user can fix the manifest
from kubectl's message alone.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from streamjob_contract.sparkconf import OWNED_CONFS

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def base() -> dict[str, Any]:
    """A valid StreamJob that each invalid case breaks in one place."""
    docs = list(yaml.safe_load_all((REPO / "examples" / "s3-savepoints.yaml").read_text()))
    return copy.deepcopy(next(d for d in docs if d["kind"] == "StreamJob"))


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for p in parents:
            node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
        node[leaf] = value

    return mutate


def removing(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        del node[leaf]

    return mutate


def spark_conf(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["spec"].setdefault("sparkConf", {})[key] = value

    return mutate


def kafka_sink(**kafka: Any) -> Callable[[dict[str, Any]], None]:
    """The pipeline's sink replaced by a kafka sink with these settings (None: no kafka block)."""
    def mutate(obj: dict[str, Any]) -> None:
        sink: dict[str, Any] = {"kind": "kafka"}
        if kafka:
            sink["kafka"] = {k: v for k, v in kafka.items() if v is not None}
        obj["spec"]["job"]["pipeline"]["sink"] = sink

    return mutate


KAFKA_OK = {"bootstrapServers": "kafka:9092", "topic": "windows"}
SASL_OK = {"mechanism": "SCRAM-SHA-256", "securityProtocol": "SASL_SSL", "secretRef": {"name": "kafka-creds"}}


def kafka_source(sasl: Any = None, **options: str) -> Callable[[dict[str, Any]], None]:
    """The pipeline's first source turned into a kafka source with these options and SASL settings."""
    def mutate(obj: dict[str, Any]) -> None:
        source = obj["spec"]["job"]["pipeline"]["sources"][0]
        source.update({"kind": "kafka", "options": {"kafka.bootstrap.servers": "kafka:9093", "subscribe": "clicks", **options}})
        if sasl is not None:
            source["sasl"] = sasl

    return mutate


def mounted(path: str, kind: str = "hostPath") -> dict[str, Any]:
    """A pod template mounting a volume of `kind` at `path` in the main container."""
    source = {"path": path} if kind == "hostPath" else {}
    return {"spec": {"containers": [{"name": "main", "volumeMounts": [{"name": "state", "mountPath": path}]}],
                     "volumes": [{"name": "state", kind: source}]}}


# One key per kind of credential a Spark or Hadoop conf can carry.
SECRET_CONF_KEYS = [
    "spark.hadoop.fs.s3a.access.key",
    "spark.hadoop.fs.s3a.secret.key",
    "spark.hadoop.fs.s3a.session.token",
    "spark.hadoop.fs.s3a.bucket.clicks.secret.key",  # per-bucket S3A settings
    "spark.hadoop.fs.s3a.encryption.key",  # SSE-C
    "spark.hadoop.fs.s3.awsSecretAccessKey",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
    "spark.hadoop.fs.gs.auth.service.account.private.key",
    "spark.ssl.keyStorePassword",
    "spark.ssl.trustStorePassword",
    "spark.ssl.keyPassword",
    "spark.authenticate.secret",
    "spark.kubernetes.authenticate.driver.oauthToken",
    "spark.kafka.clusters.main.ssl.keystore.password",
    "spark.kafka.clusters.main.sasl.jaas.config",
    "spark.sql.catalog.lake.token",
]
# Keys that only say where or how a credential is found: accepted.
CREDENTIAL_SETTINGS = {
    "spark.hadoop.fs.s3a.aws.credentials.provider": "software.amazon.awssdk.auth.credentials.WebIdentityTokenFileCredentialsProvider",
    "spark.hadoop.fs.s3a.delegation.token.binding": "org.apache.hadoop.fs.s3a.auth.delegation.SessionTokenBinding",
    "spark.authenticate.secret.file": "/etc/spark-secret/secret",
    "spark.kubernetes.authenticate.driver.oauthTokenFile": "/var/run/token",
    "spark.kafka.clusters.main.sasl.token.mechanism": "SCRAM-SHA-512",
    "spark.ssl.keyStoreType": "PKCS12",
}


def both(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        for m in mutations:
            m(obj)

    return mutate


INVALID = [
    pytest.param(setting("spec.upgradeMode", "hot-swap"), "spec.upgradeMode", id="unknown upgradeMode is refused"),
    pytest.param(setting("spec.state", "paused"), "spec.state", id="unknown desired state is refused"),
    pytest.param(removing("spec.image"), "spec.image", id="missing image is refused"),
    pytest.param(removing("spec.checkpoint"), "spec.checkpoint", id="missing checkpoint is refused"),
    pytest.param(removing("spec.savepoint"), "spec.upgradeMode", id="savepoint upgrades without a savepoint location are refused"),
    pytest.param(setting("spec.savepoint.retention.count", 0), "spec.savepoint.retention.count", id="retention count below one is refused"),
    pytest.param(setting("spec.restartPolicy.maxDelaySeconds", 1), "spec.restartPolicy.maxDelaySeconds",
                 id="backoff max below the initial delay is refused"),
    pytest.param(setting("spec.checkpoint.location", "hdfs://nn/ckpt"), "spec.checkpoint.location",
                 id="checkpoint location with an unsupported scheme is refused"),
    pytest.param(setting("spec.savepoint.location", "gs://bucket/sp"), "spec.savepoint.location",
                 id="savepoint location outside S3 is refused"),
    pytest.param(setting("spec.s3.credentialsSecret.secretAccessKey", "hunter2"), "secretAccessKey",
                 id="inline S3 secret key is refused"),
    pytest.param(setting("spec.s3.accessKeyId", "AKIA0000"), "accessKeyId", id="inline S3 access key is refused"),
    pytest.param(removing("spec.s3"), "spec.s3", id="S3 locations without S3 settings are refused"),
    pytest.param(setting("spec.executor.instances", -1), "spec.executor.instances", id="negative executor count is refused"),
    pytest.param(setting("spec.statePartitions", 0), "spec.statePartitions", id="zero state partitions are refused"),
    pytest.param(setting("spec.restartPolicy.type", "Always"), "spec.restartPolicy.type", id="unknown restart policy is refused"),
    pytest.param(setting("spec.job.entrypoint", "jobs.clicks:build"), "spec.job",
                 id="both an entrypoint and a pipeline are refused"),
    pytest.param(removing("spec.job.pipeline"), "spec.job", id="neither an entrypoint nor a pipeline is refused"),
    pytest.param(setting("spec.job.pipeline.sources.0.kind", "socket"), "spec.job.pipeline.sources[0].kind",
                 id="unknown source kind is refused"),
    pytest.param(both(setting("spec.job.pipeline.sources.0.kind", "files")), "spec.job.pipeline.sources[0]",
                 id="files source without path format and schema is refused"),
    pytest.param(setting("spec.job.pipeline.sources.0.eventTime.watermarkDelay", "ten seconds"),
                 "spec.job.pipeline.sources[0].eventTime.watermarkDelay", id="malformed watermark delay is refused"),
    pytest.param(kafka_sink(), "spec.job.pipeline.sink.kafka", id="kafka sink without kafka settings is refused"),
    pytest.param(kafka_sink(**{**KAFKA_OK, "topic": None}), "spec.job.pipeline.sink.kafka.topic",
                 id="kafka sink without topic is refused"),
    pytest.param(kafka_sink(**{**KAFKA_OK, "bootstrapServers": None}), "spec.job.pipeline.sink.kafka.bootstrapServers",
                 id="kafka sink without bootstrap servers is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, delivery="exactlyTwice"), "spec.job.pipeline.sink.kafka.delivery",
                 id="unknown delivery guarantee is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, transactionTimeoutMs=1_000_000), "spec.job.pipeline.sink.kafka.transactionTimeoutMs",
                 id="transaction timeout above the broker's maximum is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={"mechanism": "PLAIN"}), "spec.job.pipeline.sink.kafka.sasl.secretRef",
                 id="kafka sink SASL without a secretRef is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "password": "hunter2"}), "spec.job.pipeline.sink.kafka.sasl.password",
                 id="inline kafka sink SASL password is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "secretRef": {"name": "kafka-creds", "password": "hunter2"}}),
                 "spec.job.pipeline.sink.kafka.sasl.secretRef.password", id="inline password in a SASL secretRef is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "mechanism": "GSSAPI"}), "spec.job.pipeline.sink.kafka.sasl.mechanism",
                 id="unknown SASL mechanism is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "securityProtocol": "PLAINTEXT"}),
                 "spec.job.pipeline.sink.kafka.sasl.securityProtocol", id="SASL without a SASL security protocol is refused"),
    pytest.param(kafka_source({"mechanism": "PLAIN"}), "spec.job.pipeline.sources[0].sasl.secretRef",
                 id="kafka source SASL without a secretRef is refused"),
    pytest.param(kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "securityProtocol": "SASL_PLAINTEXT", "caSecretRef": {"name": "kafka-ca"}}),
                 "spec.job.pipeline.sink.kafka.sasl.caSecretRef", id="a brokers' CA without TLS is refused"),
    pytest.param(kafka_source({**SASL_OK, "caSecretRef": {"name": "Kafka_CA"}}), "spec.job.pipeline.sources[0].sasl.caSecretRef.name",
                 id="a CA Secret name that is not a Secret name is refused"),
    pytest.param(kafka_source(**{"kafka.sasl.jaas.config": 'PlainLoginModule required username="u" password="hunter2";'}),
                 "spec.job.pipeline.sources[0].options", id="kafka source credentials in options are refused"),
    pytest.param(setting("spec.job.pipeline.sources.0.sasl", SASL_OK), "spec.job.pipeline.sources[0].sasl",
                 id="SASL on a source that is not kafka is refused"),
    pytest.param(setting("spec.driver.memory", "lots"), "spec.driver.memory", id="malformed driver memory is refused"),
    pytest.param(setting("spec.deletion.timeoutSeconds", -5), "spec.deletion.timeoutSeconds", id="negative deletion timeout is refused"),
    pytest.param(setting("metadata.name", "a" * 70), "metadata.name", id="name longer than 63 characters is refused"),
    pytest.param(setting("metadata.name", "1clicks"), "metadata.name", id="name starting with a digit is refused"),
    pytest.param(setting("metadata.name", "clicks.per.user"), "metadata.name", id="name with dots is refused"),
    pytest.param(setting("spec.checkpoint.location", "file:///data/ck"), "spec.checkpoint.location: Invalid value: a file:// "
                 "checkpoint on the pod's own disk is lost", id="file checkpoint without a volume is refused"),
    pytest.param(both(setting("spec.checkpoint.location", "file:///data/ck"), setting("spec.podTemplate", mounted("/data", "emptyDir"))),
                 "spec.checkpoint.location", id="file checkpoint on an emptyDir is refused"),
    pytest.param(both(setting("spec.checkpoint.location", "file:///database/ck"), setting("spec.podTemplate", mounted("/data"))),
                 "spec.checkpoint.location", id="file checkpoint beside the mounted volume is refused"),
    pytest.param(both(setting("spec.checkpoint.location", "file:///data/ck"), setting("spec.driver.podTemplate", mounted("/data"))),
                 "spec.checkpoint.location", id="file checkpoint mounted in the driver only is refused"),
    pytest.param(setting("spec.podTemplate.spec.restartPolicy", "Always"), "spec.podTemplate.spec.restartPolicy",
                 id="template restartPolicy is refused"),
    pytest.param(setting("spec.executor.podTemplate.spec.serviceAccountName", "admin"), "spec.executor.podTemplate.spec.serviceAccountName",
                 id="template serviceAccountName is refused"),
    pytest.param(setting("spec.podTemplate.spec.containers", [{"name": "driver", "image": "x"}]), "spec.podTemplate.spec.containers",
                 id="template container named like the operator's is refused"),
    pytest.param(setting("spec.podTemplate.spec.containers", [{"image": "x"}]), "spec.podTemplate.spec.containers[0].name",
                 id="template container without a name is refused"),
    pytest.param(setting("spec.podTemplate.spec.volumes", [{"name": "streamjob-job", "emptyDir": {}}]), "spec.podTemplate.spec.volumes",
                 id="template volume named like the operator's is refused"),
    pytest.param(setting("spec.podTemplate.metadata", {"name": "x"}), "spec.podTemplate.metadata", id="template pod name is refused"),
    pytest.param(setting("spec.imagePullSecrets", [{"name": ""}]), "spec.imagePullSecrets[0].name", id="empty pull secret name is refused"),
    *(
        # the runtime's own words (streamjob_contract.sparkconf), so apply time and exit 12 say the same
        pytest.param(spark_conf(owned.key, "1"), f"spec.sparkConf[{owned.key}]: Forbidden: {owned.rule}",
                     id=f"sparkConf {owned.key} owned by the runtime is refused")
        for owned in OWNED_CONFS
    ),
    *(
        # a credential in sparkConf would stand in the spec, in status.lastReconciledSpec and in the driver's arguments
        pytest.param(spark_conf(key, "hunter2"), f"sparkConf[{key}] holds a credential", id=f"sparkConf {key} is refused")
        for key in SECRET_CONF_KEYS
    ),
]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_accepted(kubectl_run, streamjob_crd, namespace, path):
    result = kubectl_run("apply", "-n", namespace, "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "StreamJob"]
    for name in names:
        got = yaml.safe_load(kubectl_run("get", "sj", name, "-n", namespace, "-o", "yaml").stdout)
        # defaults from the schema were filled in by the API server
        assert got["spec"]["restartPolicy"]["type"] in {"Never", "FixedDelay", "ExponentialBackoff", "FailureRate"}
        assert got["spec"]["statePartitions"] >= 1


@pytest.mark.parametrize(("mutate", "field"), INVALID)
def test_invalid_manifest_is_refused_naming_the_field(kubectl_run, streamjob_crd, namespace, mutate, field):
    obj = base()
    mutate(obj)
    result = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert result.returncode != 0, f"accepted an invalid manifest:\n{yaml.safe_dump(obj)}"
    assert field in result.stderr, result.stderr
    assert kubectl_run("get", "sj", obj["metadata"]["name"], "-n", namespace, check=False).returncode != 0


def test_settings_about_credentials_are_accepted_in_spark_conf(kubectl_run, streamjob_crd, namespace):
    obj = base()
    obj["spec"]["sparkConf"] = dict(CREDENTIAL_SETTINGS)
    result = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert result.returncode == 0, result.stderr
    got = yaml.safe_load(kubectl_run("get", "sj", obj["metadata"]["name"], "-n", namespace, "-o", "yaml").stdout)
    assert got["spec"]["sparkConf"] == CREDENTIAL_SETTINGS


def test_kafka_sasl_by_secret_reference_is_accepted(kubectl_run, streamjob_crd, namespace):
    obj = base()
    kafka_source(SASL_OK)(obj)
    kafka_sink(**KAFKA_OK, sasl={**SASL_OK, "secretRef": {"name": "kafka-creds", "usernameKey": "user", "passwordKey": "pass"}})(obj)
    kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))
    got = yaml.safe_load(kubectl_run("get", "sj", obj["metadata"]["name"], "-n", namespace, "-o", "yaml").stdout)["spec"]["job"]
    assert got["pipeline"]["sources"][0]["sasl"]["secretRef"] == {"name": "kafka-creds", "usernameKey": "username", "passwordKey": "password"}
    assert got["pipeline"]["sink"]["kafka"]["sasl"]["secretRef"]["passwordKey"] == "pass"


def test_a_brokers_ca_by_secret_reference_is_accepted_with_tls(kubectl_run, streamjob_crd, namespace):
    obj = base()
    kafka_source({"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "kafka-creds"}, "caSecretRef": {"name": "my-cluster-cluster-ca-cert"}})(obj)
    kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))
    got = yaml.safe_load(kubectl_run("get", "sj", obj["metadata"]["name"], "-n", namespace, "-o", "yaml").stdout)["spec"]["job"]
    # the default protocol (SASL_SSL) and key (Strimzi's ca.crt) filled in by the API server
    assert got["pipeline"]["sources"][0]["sasl"]["caSecretRef"] == {"name": "my-cluster-cluster-ca-cert", "key": "ca.crt"}
    assert got["pipeline"]["sources"][0]["sasl"]["securityProtocol"] == "SASL_SSL"


def test_changing_state_partitions_under_last_state_is_refused(kubectl_run, streamjob_crd, namespace):
    obj = base()
    obj["spec"]["upgradeMode"] = "last-state"
    kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))
    obj["spec"]["statePartitions"] = 16
    result = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert result.returncode != 0
    assert "spec.statePartitions" in result.stderr, result.stderr


def test_printer_columns_show_state_and_savepoint(kubectl_run, streamjob_crd, namespace):
    kubectl_run("apply", "-n", namespace, "-f", str(REPO / "examples" / "minimal.yaml"))
    header = kubectl_run("get", "sj", "-n", namespace).stdout.splitlines()[0].split()
    assert header[:6] == ["NAME", "STATE", "READY", "RESTARTS", "BATCH", "LAST-SAVEPOINT"]
    assert kubectl_run("get", "streamjob", "minimal", "-n", namespace).returncode == 0
    # the savepoint column reads at a glance: its age; the long path only with -o wide
    path = "s3://streamjob/savepoints/minimal/minimal-20261122T101500Z-manual"
    status = {"status": {"lastSavepoint": {"path": path, "batchId": 7, "time": "2020-01-01T00:00:00Z", "trigger": "manual"}}}
    kubectl_run("patch", "sj", "minimal", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    row = kubectl_run("get", "sj", "minimal", "-n", namespace, "--no-headers").stdout
    assert path not in row and re.search(r"\s\d+y\d*d?\s", row), row  # e.g. "6y330d", not the path
    assert path in kubectl_run("get", "sj", "minimal", "-n", namespace, "-o", "wide").stdout


@pytest.mark.parametrize("checkpoint", ["file:///data/ck", "file:///data", "file:///data/"], ids=["below", "at", "at-slash"])
def test_a_file_checkpoint_on_a_mounted_volume_is_accepted(kubectl_run, streamjob_crd, namespace, checkpoint):
    obj = base()
    obj["spec"]["checkpoint"]["location"] = checkpoint
    obj["spec"]["podTemplate"] = mounted("/data")
    result = kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj), check=False)
    assert result.returncode == 0, result.stderr


def test_a_pod_template_is_stored_as_written(kubectl_run, streamjob_crd, namespace):
    """Standard Pod fields the schema does not type (tolerations, affinity, sidecars...) survive the API server."""
    template = {
        "metadata": {"labels": {"team": "payments"}, "annotations": {"example.com/owner": "payments"}},
        "spec": {
            "nodeSelector": {"pool": "streaming"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "spark", "effect": "NoSchedule"}],
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
            "securityContext": {"fsGroup": 2000},
            "containers": [{"name": "main", "env": [{"name": "TZ", "value": "UTC"}],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": True}]},
                           {"name": "log-shipper", "image": "busybox:1.36", "args": ["sleep", "infinity"]}],
            "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
            "imagePullSecrets": [{"name": "mirror"}],
        },
    }
    obj = base()
    obj["spec"]["podTemplate"] = template
    obj["spec"]["executor"]["podTemplate"] = {"spec": {"nodeSelector": {"spot": "true"}}}
    obj["spec"]["imagePullSecrets"] = [{"name": "registry"}]
    kubectl_run("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(obj))
    got = yaml.safe_load(kubectl_run("get", "sj", obj["metadata"]["name"], "-n", namespace, "-o", "yaml").stdout)["spec"]
    assert got["podTemplate"] == template
    assert got["executor"]["podTemplate"] == {"spec": {"nodeSelector": {"spot": "true"}}}
    assert got["imagePullSecrets"] == [{"name": "registry"}]
