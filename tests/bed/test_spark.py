"""Spark on the test bed: local mode through s3a://, and real Spark on Kubernetes with executor pods on the real node."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from testbed import TestBed
from testbed.waiting import wait_pod_phase

RUNTIME_IMAGE = "ghcr.io/streamjob/streamjob-runtime:0.1.0"


def test_spark_local_writes_and_reads_parquet_through_s3a(spark_local: Any, session_bed: TestBed) -> None:
    s3 = session_bed.s3_client()  # the S3 the session's local Spark writes to
    prefix = f"spark-local-{uuid.uuid4().hex[:8]}"
    path = f"s3a://streamjob/{prefix}/events"
    rows = [(i, f"event-{i}") for i in range(20)]

    spark_local.createDataFrame(rows, "id int, name string").write.parquet(path)
    back = spark_local.read.parquet(path)

    assert sorted((r.id, r.name) for r in back.collect()) == rows
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="streamjob", Prefix=prefix)["Contents"]]
    assert f"{prefix}/events/_SUCCESS" in keys
    assert any(k.endswith(".parquet") for k in keys)


JOB = """
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("testbed-k8s").getOrCreate()
sc = spark.sparkContext
total = sc.parallelize(range(100), 2).map(lambda x: x * 2).sum()
executors = sc._jsc.sc().getExecutorIds().size()
print(f"RESULT total={total} executors={executors}", flush=True)
spark.stop()
"""


def test_spark_on_kubernetes_runs_executor_pods_under_a_namespaced_role(
    core_v1: client.CoreV1Api, kube_api: client.ApiClient, namespace: str, testbed: TestBed
) -> None:
    rbac = client.RbacAuthorizationV1Api(kube_api)
    core_v1.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="spark-driver")))
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "spark-driver"},
        "rules": [{
            "apiGroups": [""],
            "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"],
        }],
    })
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "spark-driver"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark-driver"},
        "subjects": [{"kind": "ServiceAccount", "name": "spark-driver", "namespace": namespace}],
    })
    core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="job"), data={"job.py": JOB}))
    driver = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "driver", "labels": {"app": "testbed-k8s"}},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "spark-driver",
            "containers": [{
                "name": "driver",
                "image": RUNTIME_IMAGE,
                "command": ["/opt/spark/bin/spark-submit"],
                "args": [
                    "--master", "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
                    "--deploy-mode", "client",
                    "--driver-memory", "512m",
                    "--conf", "spark.kubernetes.driver.pod.name=driver",
                    "--conf", "spark.driver.host=$(POD_IP)",
                    "--conf", f"spark.kubernetes.namespace={namespace}",
                    "--conf", "spark.executor.instances=1",
                    "--conf", "spark.executor.memory=512m",
                    "--conf", f"spark.kubernetes.container.image={RUNTIME_IMAGE}",
                    "--conf", "spark.kubernetes.executor.deleteOnTermination=false",
                    "--conf", "spark.ui.enabled=false",
                    "/opt/job/job.py",
                ],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [{"name": "job", "mountPath": "/opt/job"}],
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            "volumes": [{"name": "job", "configMap": {"name": "job"}}],
        },
    }
    core_v1.create_namespaced_pod(namespace, driver)

    done = wait_pod_phase(core_v1, namespace, "driver", {"Succeeded", "Failed"}, timeout=240)

    driver_log = testbed.pod_log(namespace, "driver")
    assert done.status.phase == "Succeeded", driver_log[-5000:]
    assert "RESULT total=9900 executors=1" in driver_log
    executors = core_v1.list_namespaced_pod(namespace, label_selector="spark-role=executor").items
    assert len(executors) == 1, [p.metadata.name for p in executors]
    executor = executors[0]
    assert executor.metadata.owner_references[0].name == "driver"
    assert executor.status.container_statuses[0].container_id.startswith("containerd://")
    assert executor.spec.node_name == testbed.node_name
    executor_log = testbed.pod_log(namespace, executor.metadata.name)
    assert "KubernetesExecutorBackend" in executor_log or "Successfully registered with driver" in executor_log, executor_log[-3000:]
