"""Pure builders of the Kubernetes objects a StreamJob owns, as plain dicts.

Called by ``k8s.act`` (which sends them) and by unit tests. No client, no
I/O: values in, manifests out. Names and labels come from
``reconcile.names`` so the decision code and these builders agree.

The driver pod runs the job runtime under ``spark-submit`` in client mode
inside the pod; Spark on Kubernetes creates the executor pods, owned by the
driver pod (``spark.kubernetes.driver.pod.name``), under a service account
that may manage pods and create configmaps in the namespace only (DRIVER_ROLE_RULES).
S3 credentials reach driver and executors only as Secret references.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from streamjob_contract.jobdef import JobDefinition, KafkaProducers, declared_sink, dump_job_definition, kafka_ca_secrets, sasl_clients
from streamjob_contract.kafka_names import KAFKA_CA_MOUNT, sasl_env
from streamjob_operator.api.spec import API_GROUP, API_VERSION, KIND, StreamJobSpec
from streamjob_operator.k8s import pods
from streamjob_operator.reconcile import names
from streamjob_operator.reconcile.model import CreateDriver

Manifest = dict[str, Any]

JOB_MOUNT = "/etc/streamjob/job"
TOKEN_MOUNT = "/etc/streamjob/token"
TOKEN_KEY = "token"
JOB_KEY = "job.json"
EXECUTOR_TEMPLATE_KEY = "executor-pod.json"  # Spark's executor pod template, in the job ConfigMap
# What Spark 4's driver calls in client mode, measured with the API server's audit
# log (tests/e2e/test_rbac_minimal.py proves each verb used by a named step):
# its own pod (get, for the executors' owner reference), executor pods (create,
# list+watch them, delete a failed one, deletecollection by label at stop) and
# the executor ConfigMap (create at start, deletecollection by label at stop).
# Spark's PVC and Service calls are switched off in spark_conf. The charts
# streamjob.driverRules must equal this (tests/e2e/test_rbac_minimal.py).
DRIVER_ROLE_RULES: list[dict[str, list[str]]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "deletecollection"]},
]


@dataclass(frozen=True)
class Owner:
    """The StreamJob that owns the objects (for owner references)."""

    name: str
    namespace: str
    uid: str


@dataclass(frozen=True)
class RuntimeLayout:
    """Where things are inside the runtime image; operator settings, not per-job spec."""

    # The runtime is the container's main process and starts Spark's driver JVM
    # in client mode (PySpark launches it through $SPARK_HOME/bin/spark-submit).
    # Not `spark-submit driver.py`: there the JVM is PID 1 of the container and a
    # SIGTERM kills it with 143 before the runtime can stop the query cleanly.
    runtime_command: str = "streamjob-runtime"
    control_port: int = 8765
    driver_port: int = 7078
    block_manager_port: int = 7079
    termination_grace_seconds: int = 60


def owner_reference(owner: Owner, controller: bool = True) -> Manifest:
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": KIND,
        "name": owner.name,
        "uid": owner.uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _meta(owner: Owner, name: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Manifest:
    meta: Manifest = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels or names.job_labels(owner.name),
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def kafka_ca_volumes(job: JobDefinition) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, volumeMounts) that put each caSecretRef's Secret at KAFKA_CA_MOUNT/<name>/ (read-only, only
    the keys the job names), where the runtime's Kafka clients read it (jobdef.kafka_ca_file)."""
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    for i, (name, keys) in enumerate(kafka_ca_secrets(job).items()):
        volume = f"streamjob-kafka-ca-{i}"
        volumes.append({"name": volume, "secret": {"secretName": name, "defaultMode": 0o444,
                                                   "items": [{"key": k, "path": k} for k in keys]}})
        mounts.append({"name": volume, "mountPath": f"{KAFKA_CA_MOUNT}/{name}", "readOnly": True})
    return volumes, mounts


def executor_pod_template(spec: StreamJobSpec) -> Manifest:
    """spec.podTemplate with executor.podTemplate over it, the pull secrets, the Kafka CA Secrets (a Kafka source
    reads on the executors) and the restricted defaults."""
    template = pods.role_template(spec.pod_template, spec.executor.pod_template)
    return pods.executor_template(template, _pull_secrets(spec), *kafka_ca_volumes(spec.job))


def _pull_secrets(spec: StreamJobSpec) -> list[Manifest]:
    return [{"name": s.name} for s in spec.image_pull_secrets or []]


def job_config_map(owner: Owner, spec: StreamJobSpec, epoch: int) -> Manifest:
    data = {JOB_KEY: dump_job_definition(spec.job)}
    if spec.executor.instances > 0:
        data[EXECUTOR_TEMPLATE_KEY] = json.dumps(executor_pod_template(spec), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(owner, names.job_config_map(owner.name, epoch), {**names.job_labels(owner.name), names.LABEL_EPOCH: str(epoch)}),
        "data": data,
    }


def token_secret(owner: Owner, token: str) -> Manifest:
    """The per-job bearer token of the driver's control endpoint (the value comes from act)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(owner, names.token_secret(owner.name)),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def driver_service(owner: Owner, layout: RuntimeLayout) -> Manifest:
    """Headless: resolves to the current driver pod (executors and the operator may use it)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(owner, names.driver_service(owner.name)),
        "spec": {
            "clusterIP": "None",
            "selector": {names.LABEL_JOB: owner.name, names.LABEL_ROLE: names.ROLE_DRIVER},
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": "control", "port": layout.control_port, "targetPort": layout.control_port},
                {"name": "driver-rpc", "port": layout.driver_port, "targetPort": layout.driver_port},
                {"name": "blockmanager", "port": layout.block_manager_port, "targetPort": layout.block_manager_port},
            ],
        },
    }


def driver_service_account(owner: Owner) -> Manifest:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(owner, names.driver_service_account(owner.name))}


def driver_role(owner: Owner) -> Manifest:
    """Least privilege for Spark on Kubernetes: its own executors and their support objects, this namespace only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(owner, names.driver_role(owner.name)),
        "rules": [dict(rule) for rule in DRIVER_ROLE_RULES],
    }


def driver_role_binding(owner: Owner) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(owner, names.driver_role(owner.name)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.driver_role(owner.name)},
        "subjects": [{"kind": "ServiceAccount", "name": names.driver_service_account(owner.name), "namespace": owner.namespace}],
    }


def service_account_of(owner: Owner, spec: StreamJobSpec) -> str:
    return spec.service_account_name or names.driver_service_account(owner.name)


def _pod_memory(memory: str, overhead: str | None) -> str:
    """Spark's heap notation (1g, 512m) plus overhead (default max(384m, 10%)) as a Kubernetes quantity."""
    def mib(text: str) -> int:
        number, unit = int(text[:-1]), text[-1].lower()
        return number * {"k": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[unit] // (1 if unit != "k" else 1024)

    heap = mib(memory)
    extra = mib(overhead) if overhead else max(384, heap // 10)
    return f"{heap + extra}Mi"


def spark_conf(owner: Owner, spec: StreamJobSpec, pod: str, layout: RuntimeLayout) -> list[tuple[str, str]]:
    """Spark confs of the driver, operator-set ones last so the user's sparkConf cannot break the wiring."""
    ex = spec.executor
    conf: list[tuple[str, str]] = sorted(spec.spark_conf.items())
    conf += [
        ("spark.app.name", owner.name),
        ("spark.driver.host", "$(POD_IP)"),
        ("spark.driver.bindAddress", "$(POD_IP)"),
        ("spark.driver.port", str(layout.driver_port)),
        ("spark.driver.blockManager.port", str(layout.block_manager_port)),
        ("spark.ui.enabled", spec.spark_conf.get("spark.ui.enabled", "false")),
    ]
    if ex.instances == 0:  # local master in the driver: no executor settings (spark-submit refuses 0 executors)
        return conf
    conf += [
        ("spark.kubernetes.namespace", owner.namespace),
        ("spark.kubernetes.driver.pod.name", pod),
        ("spark.kubernetes.container.image", spec.image),
        ("spark.kubernetes.container.image.pullPolicy", spec.image_pull_policy),
        ("spark.kubernetes.executor.podNamePrefix", pod),
        ("spark.executor.instances", str(ex.instances)),
        ("spark.executor.cores", str(ex.cores)),
        *([("spark.kubernetes.executor.request.cores", ex.core_request)] if ex.core_request else []),
        ("spark.executor.memory", ex.memory),
        ("spark.kubernetes.executor.label." + names.LABEL_JOB, owner.name),
        # pod template, pull secrets and securityContext of the executors (job_config_map writes the file)
        ("spark.kubernetes.executor.podTemplateFile", f"{JOB_MOUNT}/{EXECUTOR_TEMPLATE_KEY}"),
        ("spark.kubernetes.executor.podTemplateContainerName", pods.EXECUTOR_CONTAINER),
        # Least privilege (DRIVER_ROLE_RULES): the headless Service is the operator's, and
        # without these Spark lists PVCs and deletes Services and PVCs by label at stop.
        ("spark.kubernetes.driver.service.deleteOnTermination", "false"),
        ("spark.kubernetes.driver.ownPersistentVolumeClaim", "false"),
        ("spark.kubernetes.driver.reusePersistentVolumeClaim", "false"),
    ]
    if ex.memory_overhead:
        conf.append(("spark.executor.memoryOverhead", ex.memory_overhead))
    if spec.s3 is not None and spec.s3.credentials_secret is not None:
        ref = spec.s3.credentials_secret
        conf += [
            ("spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID", f"{ref.name}:{ref.access_key_id_key}"),
            ("spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY", f"{ref.name}:{ref.secret_access_key_key}"),
        ]
    conf += executor_sink_credentials(spec.job)
    return conf


def executor_sink_credentials(job: JobDefinition) -> list[tuple[str, str]]:
    """With `sink.kafka.producers: executors` the executors' tasks produce: the sink's SASL user name and
    password reach them as the driver's do, from the Secret by reference (secretKeyRef), never as values."""
    sink = declared_sink(job)
    kafka = sink.kafka if sink is not None else None
    if kafka is None or kafka.sasl is None or kafka.producers != KafkaProducers.executors:
        return []
    user_var, password_var = sasl_env("sink")
    ref = kafka.sasl.secret_ref
    return [
        (f"spark.kubernetes.executor.secretKeyRef.{user_var}", f"{ref.name}:{ref.username_key}"),
        (f"spark.kubernetes.executor.secretKeyRef.{password_var}", f"{ref.name}:{ref.password_key}"),
    ]


def runtime_args(owner: Owner, spec: StreamJobSpec, action: CreateDriver, layout: RuntimeLayout) -> list[str]:
    args = [
        "run",
        "--job", f"{JOB_MOUNT}/{JOB_KEY}",
        "--name", owner.name,
        "--namespace", owner.namespace,
        "--checkpoint", action.checkpoint_location,
        "--state-partitions", str(spec.state_partitions),
        "--trigger-interval", spec.checkpoint.trigger_interval,
        "--control-address", f"$(POD_IP):{layout.control_port}",
        "--token-file", f"{TOKEN_MOUNT}/{TOKEN_KEY}",
        "--termination-message-file", "/dev/termination-log",
        "--owner-uid", owner.uid,  # the runtime claims the checkpoint for this job and refuses another's
    ]
    if action.standby:
        args.append("--standby")  # the savepoint to restore comes with the release (POST /release)
    if action.restore_from:
        args += ["--restore-from", action.restore_from]
    if action.expect_committed is not None:
        args += ["--expect-committed", str(action.expect_committed)]  # a checkpoint behind it is refused (exit 15)
    if spec.allow_non_restored_state:
        args.append("--allow-non-restored-state")
    if spec.savepoint is not None:
        # the timeout lets the driver prune this job's abandoned savepoint directories (job_runtime.checkpoints.hygiene)
        args += ["--savepoint-location", spec.savepoint.location,
                 "--savepoint-timeout-seconds", str(spec.savepoint.timeout_seconds)]
    if spec.s3 is not None:
        if spec.s3.endpoint:
            args += ["--s3-endpoint", spec.s3.endpoint]
        args += ["--s3-region", spec.s3.region]
        if spec.s3.path_style_access:
            args.append("--s3-path-style")
    return args


def secret_env(variable: str, secret: str, key: str) -> Manifest:
    """An env variable the kubelet fills from a Secret's key (valueFrom.secretKeyRef)."""
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def kafka_credentials_env(job: JobDefinition) -> list[Manifest]:
    """The SASL user name and password of each Kafka client of the job, as env variables the kubelet
    fills from the Secret (valueFrom.secretKeyRef): never the values themselves, and no Secret read
    by the driver (its Role has no rights on Secrets)."""
    env: list[Manifest] = []
    for role, sasl in sasl_clients(job):
        user_var, password_var = sasl_env(role)
        ref = sasl.secret_ref
        env += [secret_env(user_var, ref.name, ref.username_key), secret_env(password_var, ref.name, ref.password_key)]
    return env


def driver_pod(owner: Owner, spec: StreamJobSpec, action: CreateDriver, layout: RuntimeLayout) -> Manifest:
    """The driver pod of one epoch: the job runtime, starting Spark's driver in client mode."""
    # executor.instances 0 runs the tasks in the driver: Spark's local master, no executor pods
    master = ("k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)" if spec.executor.instances > 0
              else f"local[{spec.driver.cores}]")
    spark = ["--master", master, "--conf", f"spark.driver.memory={spec.driver.memory}",
             "--conf", "spark.submit.deployMode=client"]
    for key, value in spark_conf(owner, spec, action.pod, layout):
        spark += ["--conf", f"{key}={value}"]
    env: list[Manifest] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SPARK_USER", "value": "spark"},
    ]
    if spec.s3 is not None:
        env.append({"name": "AWS_REGION", "value": spec.s3.region})
        if spec.s3.credentials_secret is not None:
            ref = spec.s3.credentials_secret
            env += [secret_env("AWS_ACCESS_KEY_ID", ref.name, ref.access_key_id_key),
                    secret_env("AWS_SECRET_ACCESS_KEY", ref.name, ref.secret_access_key_key)]
    env += kafka_credentials_env(spec.job)
    memory = _pod_memory(spec.driver.memory, spec.driver.memory_overhead)
    ca_volumes, ca_mounts = kafka_ca_volumes(spec.job)
    labels = names.driver_labels(owner.name, action.epoch)
    own = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(owner, action.pod, labels, {names.ANNOTATION_SPEC_HASH: action.spec_hash}),
        "spec": {
            "restartPolicy": "Never",  # the operator restarts, per spec.restartPolicy, from the latest checkpoint
            "serviceAccountName": service_account_of(owner, spec),
            "automountServiceAccountToken": True,
            "terminationGracePeriodSeconds": layout.termination_grace_seconds,
            "containers": [
                {
                    "name": "driver",
                    "image": spec.image,
                    "imagePullPolicy": spec.image_pull_policy,
                    "command": [layout.runtime_command],
                    "args": runtime_args(owner, spec, action, layout) + spark,
                    "env": env,
                    "ports": [
                        {"name": "control", "containerPort": layout.control_port},
                        {"name": "driver-rpc", "containerPort": layout.driver_port},
                        {"name": "blockmanager", "containerPort": layout.block_manager_port},
                    ],
                    "resources": {
                        "requests": {"cpu": spec.driver.core_request or str(spec.driver.cores), "memory": memory},
                        "limits": {"memory": memory},
                    },
                    "volumeMounts": [
                        {"name": "streamjob-job", "mountPath": JOB_MOUNT, "readOnly": True},
                        {"name": "streamjob-token", "mountPath": TOKEN_MOUNT, "readOnly": True},
                        # the only place the runtime image writes (java.io.tmpdir, spark.local.dir):
                        # the image works with a read-only root filesystem (docs/images.md)
                        {"name": "streamjob-tmp", "mountPath": "/tmp"},
                        *ca_mounts,
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                }
            ],
            "volumes": [
                {"name": "streamjob-job", "configMap": {"name": names.job_config_map(owner.name, action.epoch)}},
                {"name": "streamjob-token", "secret": {"secretName": names.token_secret(owner.name), "defaultMode": 0o444}},
                {"name": "streamjob-tmp", "emptyDir": {}},
                *ca_volumes,
            ],
        },
    }
    # the user's pod template (spec.podTemplate, driver.podTemplate) merged in, restricted defaults under it
    template = pods.role_template(spec.pod_template, spec.driver.pod_template)
    pod = pods.driver_pod(template, own, _pull_secrets(spec))
    pod["spec"]["tolerations"] = node_loss_tolerations(pod["spec"].get("tolerations") or [],
                                                       spec.restart_policy.driver_unreachable_seconds)
    if action.avoid_node:
        avoid_node(pod["spec"], action.avoid_node)
    return pod


def avoid_node(pod_spec: Manifest, node: str) -> None:
    """A preferred node affinity away from ``node`` (where the last driver stopped answering), added to the
    template's own: the scheduler takes any other node that fits first, and this one when none does
    (a one-node cluster). The node may be Ready still: the node controller marks it after its grace period."""
    affinity = pod_spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
        {"weight": 100, "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [node]}]}})


NODE_LOSS_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def node_loss_tolerations(tolerations: list[Manifest], seconds: int) -> list[Manifest]:
    """The driver leaves a lost node after ``seconds`` (spec.restartPolicy.driverUnreachableSeconds), not the 300 s
    Kubernetes adds by default: a replaced driver is fenced, so the replacement need not wait. A template's own
    toleration of either taint (or of every taint) wins; 0 leaves both to Kubernetes' defaults."""
    if seconds <= 0 or any(not t.get("key") and t.get("operator") == "Exists" and t.get("effect") in (None, "", "NoExecute")
                           for t in tolerations):  # the template tolerates every taint: Kubernetes takes the shortest time
        return tolerations
    named = {t.get("key") for t in tolerations}
    return tolerations + [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                          for key in NODE_LOSS_TAINTS if key not in named]


def pretty(manifest: Manifest) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True)
