"""Pods created through the API run as local processes on the process kubelet, as in a cluster."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from kubernetes import client

from testbed import TestBed
from testbed.waiting import wait_for, wait_gone, wait_pod_phase


def pod(name: str, command: list[str], *, image: str = "python:3.11", **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": image, "command": command}
    for key in ("env", "envFrom", "volumeMounts", "workingDir", "args"):
        if key in spec:
            container[key] = spec.pop(key)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def test_pod_that_exits_0_succeeds(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    core_v1.create_namespaced_pod(namespace, pod("ok", ["sh", "-c", "echo hello from $(POD_NAME)"], image="busybox",
                                                 env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]))

    done = wait_pod_phase(core_v1, namespace, "ok", {"Succeeded", "Failed"})

    assert done.status.phase == "Succeeded"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert done.spec.node_name == testbed.node_name
    assert "hello from ok" in testbed.pod_log(namespace, "ok")


def test_pod_that_exits_3_fails_with_that_code(core_v1: client.CoreV1Api, namespace: str) -> None:
    failing = pod("fails", ["sh", "-c", "echo about to fail >&2; exit 3"], image="busybox")
    failing["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core_v1.create_namespaced_pod(namespace, failing)

    done = wait_pod_phase(core_v1, namespace, "fails", {"Succeeded", "Failed"})

    assert done.status.phase == "Failed"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert "about to fail" in terminated.message


def test_deleting_a_running_pod_terminates_its_process(core_v1: client.CoreV1Api, namespace: str) -> None:
    core_v1.create_namespaced_pod(namespace, pod("sleeper", ["python", "-c", "import time; time.sleep(600)"]))
    running = wait_for(
        lambda: (p := core_v1.read_namespaced_pod("sleeper", namespace)).status.phase == "Running" and p,
        60, "pod sleeper running",
    )
    pid = int(running.status.container_statuses[0].container_id.removeprefix("process://"))
    os.kill(pid, 0)  # the container's process exists

    core_v1.delete_namespaced_pod("sleeper", namespace, grace_period_seconds=5)

    wait_gone(lambda: core_v1.read_namespaced_pod("sleeper", namespace), 30, "pod sleeper")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {pid} of the deleted pod is still running")


def test_pod_sees_its_configmap_secret_and_own_ip(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"app.conf": "mode=streaming\n"}))
    core_v1.create_namespaced_secret(namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="creds"), string_data={"token": "s3cr3t"}))
    script = (
        "import json, os, socket; "
        "print(json.dumps({'conf': open('/etc/app/app.conf').read(), 'token': os.environ['TOKEN'], "
        "'ip': os.environ['POD_IP'], 'cwd': os.getcwd(), 'args': os.environ['ARGS_SEEN'], "
        "'sa': sorted(os.listdir('/var/run/secrets/kubernetes.io/serviceaccount'))}))"
    )
    core_v1.create_namespaced_pod(namespace, pod(
        "reader",
        ["python", "-c", script],
        env=[
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "ARGS_SEEN", "value": "ip=$(POD_IP) literal=$$(POD_IP)"},
        ],
        volumeMounts=[{"name": "settings", "mountPath": "/etc/app", "readOnly": True}],
        volumes=[{"name": "settings", "configMap": {"name": "settings"}}],
        workingDir="/tmp",
    ))

    done = wait_pod_phase(core_v1, namespace, "reader", {"Succeeded", "Failed"})

    output = testbed.pod_log(namespace, "reader")
    assert done.status.phase == "Succeeded", output
    seen = json.loads(output.strip().splitlines()[-1])
    ip = done.status.pod_ip
    assert ip.startswith("127.0.") and ip != "127.0.0.1"
    assert seen == {
        "conf": "mode=streaming\n",
        "token": "s3cr3t",
        "ip": ip,
        "cwd": "/tmp",
        "args": f"ip={ip} literal=$(POD_IP)",
        "sa": ["ca.crt", "namespace", "token"],
    }


def test_pod_calls_the_api_with_its_service_account_token(core_v1: client.CoreV1Api, kube_api: client.ApiClient, namespace: str, testbed: TestBed) -> None:
    rbac = client.RbacAuthorizationV1Api(kube_api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "pod-reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
    })
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "pod-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": namespace}],
    })
    # In-cluster config: KUBERNETES_SERVICE_HOST/PORT and the standard token + CA paths.
    script = (
        "import json, os, ssl, urllib.request; d='/var/run/secrets/kubernetes.io/serviceaccount/'; "
        "ns=open(d+'namespace').read(); "
        "url=f\"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/api/v1/namespaces/{ns}/pods/{os.environ['HOSTNAME']}\"; "
        "req=urllib.request.Request(url, headers={'Authorization': 'Bearer '+open(d+'token').read()}); "
        "print(json.load(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=d+'ca.crt')))['metadata']['name'])"
    )
    core_v1.create_namespaced_pod(namespace, pod("self-reader", ["python", "-c", script]))

    done = wait_pod_phase(core_v1, namespace, "self-reader", {"Succeeded", "Failed"})

    output = testbed.pod_log(namespace, "self-reader")
    assert done.status.phase == "Succeeded", output
    assert output.strip().splitlines()[-1] == "self-reader"


def test_pod_with_an_unknown_image_waits_in_err_image_pull(core_v1: client.CoreV1Api, namespace: str) -> None:
    core_v1.create_namespaced_pod(namespace, pod("no-image", ["true"], image="example.com/nobody/unknown:1"))

    waiting = wait_for(
        lambda: (s := core_v1.read_namespaced_pod("no-image", namespace).status.container_statuses) and s[0].state.waiting
        and s[0].state.waiting.reason in ("ErrImagePull", "ImagePullBackOff") and s[0].state.waiting,
        30, "pod no-image waiting on its image",
    )

    assert "example.com/nobody/unknown:1" in waiting.message
    assert core_v1.read_namespaced_pod("no-image", namespace).status.phase == "Pending"


def test_on_failure_pod_restarts_until_it_succeeds(core_v1: client.CoreV1Api, namespace: str) -> None:
    marker = "/data/attempted"
    core_v1.create_namespaced_pod(namespace, pod(
        "flaky",
        ["sh", "-c", f"if [ -f {marker} ]; then exit 0; else touch {marker}; exit 1; fi"],
        image="busybox",
        restartPolicy="OnFailure",
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    ))

    done = wait_pod_phase(core_v1, namespace, "flaky", {"Succeeded", "Failed"}, timeout=60)

    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].restart_count == 1


def test_pod_logs_are_served_through_the_api(core_v1: client.CoreV1Api, namespace: str) -> None:
    core_v1.create_namespaced_pod(namespace, pod("talker", ["sh", "-c", "for i in 1 2 3; do echo line-$i; done"], image="busybox"))
    wait_pod_phase(core_v1, namespace, "talker", {"Succeeded", "Failed"})

    def logs(**options: Any) -> str:
        # kubernetes-client 36 turns a non-JSON body into "b'...'"; read the raw body.
        return str(core_v1.read_namespaced_pod_log("talker", namespace, _preload_content=False, **options).data.decode())

    assert logs() == "line-1\nline-2\nline-3\n"
    assert logs(tail_lines=1) == "line-3\n"


def test_an_empty_dir_over_tmp_hides_the_host_tmp_but_not_the_image(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed, tmp_path: Any) -> None:
    # The test bed's own dirs (and, in CI, the clone the packages are installed
    # from) may live under /tmp: a pod mounting an emptyDir there (as the
    # operator's chart does) must still see its image's files and volumes.
    marker = tmp_path / "host-only"
    marker.write_text("host")
    core_v1.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"k": "v"}))
    script = (
        "import json, os, job_runtime, streamjob_operator; "
        f"print(json.dumps({{'tmp': sorted(os.listdir('/tmp')), 'host': os.path.exists('{marker}'), "
        "'cfg': open('/etc/cfg/k').read(), 'pkg': os.path.isfile(job_runtime.__file__)}))"
    )
    core_v1.create_namespaced_pod(namespace, pod(
        "tmp-over", ["python", "-c", script],
        volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}, {"name": "cfg", "mountPath": "/etc/cfg"}],
        volumes=[{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg"}}],
    ))
    done = wait_pod_phase(core_v1, namespace, "tmp-over", {"Succeeded", "Failed"})
    output = testbed.pod_log(namespace, "tmp-over")
    assert done.status.phase == "Succeeded", output
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["host"] is False and seen["cfg"] == "v" and seen["pkg"] is True



def test_an_empty_dir_over_tmp_hides_neither_the_spark_jars_nor_spark(
    core_v1: client.CoreV1Api, namespace: str, testbed: TestBed,
) -> None:
    # The runtime image's jars, Spark and Java stand for host dirs that may be under /tmp too (STREAMJOB_CACHE
    # there): a driver with an emptyDir at /tmp once failed with "Class org.apache.hadoop.fs.s3a.S3AFileSystem not
    # found". Here emptyDirs cover /tmp and the jars' parent, wherever it is; the pod lists them from inside.
    assert testbed.jars_dir is not None
    covered = sorted({"/tmp", str(testbed.jars_dir.resolve().parent)})
    script = (
        "import json, os; e = os.environ; "
        "print(json.dumps({k: bool(os.path.isdir(e[k]) and os.listdir(e[k])) "
        "for k in ('STREAMJOB_JARS_DIR', 'SPARK_HOME', 'JAVA_HOME') if k in e}))"
    )
    core_v1.create_namespaced_pod(namespace, pod(
        "jars-under-tmp", ["python", "-c", script], image="localhost/streamjob-dev/streamjob-runtime:0.1.0",
        volumeMounts=[{"name": f"empty-{i}", "mountPath": path} for i, path in enumerate(covered)],
        volumes=[{"name": f"empty-{i}", "emptyDir": {}} for i in range(len(covered))],
    ))
    done = wait_pod_phase(core_v1, namespace, "jars-under-tmp", {"Succeeded", "Failed"})
    output = testbed.pod_log(namespace, "jars-under-tmp")
    assert done.status.phase == "Succeeded", output
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen.get("STREAMJOB_JARS_DIR") is True and seen.get("SPARK_HOME") is True, seen
    assert all(seen.values()), seen


def test_the_paths_a_pod_keeps_over_its_volumes_include_the_jars_spark_and_java(tmp_path: Any) -> None:
    from testbed.kubelet.images import Environment
    from testbed.kubelet.worker import image_paths

    homes = {name: tmp_path / name for name in ("venv-bin", "spark", "jars", "java")}
    for home in homes.values():
        home.mkdir()
    environment = Environment(venv_bin=homes["venv-bin"], spark_home=homes["spark"], jars_dir=homes["jars"],
                              java_home=homes["java"])
    kept = image_paths(tmp_path / "pods" / "uid" / "run", environment)
    assert {str(homes[k]) for k in ("spark", "jars", "java")} <= set(kept), kept
    assert str(homes["jars"]) not in image_paths(tmp_path / "pods" / "uid" / "run"), "kept without an environment"
