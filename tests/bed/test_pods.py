"""Pods created through the API run on the test bed's node as in a cluster: exit codes, restarts, deletion, the
environment and volumes a kubelet gives a container, in-cluster API calls, pull errors, logs.

The images: the runtime image scripts/build-images.sh built (it has Python) and the node's busybox."""

from __future__ import annotations

import json
import ipaddress
import os
import time
from typing import Any

from kubernetes import client

from testbed import TestBed, imagestore
from testbed.podnet import POD_SUBNET
from testbed.waiting import wait_for, wait_gone, wait_pod_phase


def pod(name: str, command: list[str], *, image: str = imagestore.DEV_IMAGE, **spec: Any) -> dict[str, Any]:
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
    core_v1.create_namespaced_pod(namespace, pod("ok", ["sh", "-c", "echo hello from $(POD_NAME)"], image=testbed.busybox_image(),
                                                 env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]))

    done = wait_pod_phase(core_v1, namespace, "ok", {"Succeeded", "Failed"})

    assert done.status.phase == "Succeeded"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert done.spec.node_name == testbed.node_name
    assert "hello from ok" in testbed.pod_log(namespace, "ok")


def test_pod_that_exits_3_fails_with_that_code(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    failing = pod("fails", ["sh", "-c", "echo about to fail >&2; exit 3"], image=testbed.busybox_image())
    failing["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core_v1.create_namespaced_pod(namespace, failing)

    done = wait_pod_phase(core_v1, namespace, "fails", {"Succeeded", "Failed"})

    assert done.status.phase == "Failed"
    terminated = done.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert "about to fail" in terminated.message


def test_deleting_a_running_pod_terminates_its_process(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    core_v1.create_namespaced_pod(namespace, pod("sleeper", ["python3", "-c", "import time; time.sleep(600)"]))
    wait_for(lambda: core_v1.read_namespaced_pod("sleeper", namespace).status.phase == "Running", 120, "pod sleeper running")
    pid = testbed.container_pid(namespace, "sleeper")
    os.kill(pid, 0)  # the container's process exists, on this machine

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
        # the kubelet's atomic writer keeps its versions in ..data and ..<timestamp>: the files are the rest
        "'sa': sorted(n for n in os.listdir('/var/run/secrets/kubernetes.io/serviceaccount') if not n.startswith('..'))}))"
    )
    core_v1.create_namespaced_pod(namespace, pod(
        "reader",
        ["python3", "-c", script],
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
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(POD_SUBNET), ip
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
    core_v1.create_namespaced_pod(namespace, pod("self-reader", ["python3", "-c", script]))

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


def test_on_failure_pod_restarts_until_it_succeeds(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    marker = "/data/attempted"
    core_v1.create_namespaced_pod(namespace, pod(
        "flaky",
        ["sh", "-c", f"if [ -f {marker} ]; then exit 0; else touch {marker}; exit 1; fi"],
        image=testbed.busybox_image(),
        restartPolicy="OnFailure",
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    ))

    done = wait_pod_phase(core_v1, namespace, "flaky", {"Succeeded", "Failed"}, timeout=60)

    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].restart_count == 1


def test_pod_logs_are_served_through_the_api(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> None:
    core_v1.create_namespaced_pod(namespace, pod("talker", ["sh", "-c", "for i in 1 2 3; do echo line-$i; done"],
                                                 image=testbed.busybox_image()))
    wait_pod_phase(core_v1, namespace, "talker", {"Succeeded", "Failed"})

    def logs(**options: Any) -> str:
        # kubernetes-client 36 turns a non-JSON body into "b'...'"; read the raw body.
        return str(core_v1.read_namespaced_pod_log("talker", namespace, _preload_content=False, **options).data.decode())

    assert logs() == "line-1\nline-2\nline-3\n"
    assert logs(tail_lines=1) == "line-3\n"
