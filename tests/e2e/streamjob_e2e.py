"""End-to-end helpers and fixtures (re-exported by conftest.py): the StreamJob CRD on the test bed, the operator as a real subprocess, helpers to watch jobs.

Used by tests/e2e/test_*.py. The operator runs as `streamjob-operator` against
the test bed's admin kubeconfig; drivers run the real job runtime under
spark-submit (job_runtime/driver.py) as containers of the built image on the test bed's real node.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from streamjob_contract.lifecycle import LifecycleState
from kubernetes.client.rest import ApiException

import job_runtime
from streamjob_operator.api.spec import API_GROUP, API_VERSION, PLURAL
from testbed import TestBed, imagestore
from testbed.proc import ManagedProcess
from testbed.waiting import wait_for

REPO = Path(job_runtime.__file__).resolve().parents[1]
# The runtime image scripts/build-images.sh built (the node runs pods inside it)...
IMAGE = imagestore.runtime_image()
# ...and a name no image was built under, which the test bed makes a tag of it, with the tags upgrade tests move to
DEV_IMAGE = imagestore.DEV_IMAGE
NEXT_IMAGE = IMAGE.replace("0.1.0", "0.1.1")  # the release an upgrade test moves to (``built_images``)
# what a test's driver and executor ask of the scheduler: the real node has this machine's 2 CPUs, and a test runs up to
# 3 pods at once (tasks still run on `cores`, 1: a request is a scheduling weight, not a limit)
CORE_REQUEST = "250m"
RUNTIME_UID = 185  # the runtime image's USER (the top-level Dockerfile)
START_TIMEOUT = 420.0  # a Spark driver start on a loaded 2-core machine


@pytest.fixture(scope="module")
def crd(kube_api: client.ApiClient) -> None:
    install_crds(kube_api)


def install_crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for path in sorted((REPO / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            ext.create_custom_resource_definition(body)
        except ApiException as err:
            if err.status != 409:
                raise
    wait_for(lambda: _established(ext), 30, "the StreamJob CRD to be established")


def _established(ext: client.ApiextensionsV1Api) -> bool:
    crd = ext.read_custom_resource_definition(f"{PLURAL}.{API_GROUP}")
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


# renew deadline 4 s, retry period 0.8 s: a standby takes over about 6-7 s after the last renewal
LEASE_SECONDS = 6


class Operator:
    """`streamjob-operator` as a subprocess; kill() is SIGKILL, like a crashed pod."""

    def __init__(self, testbed: TestBed, log_path: Path, lease: str, extra_args: Sequence[str] = (),
                 kubeconfig: Path | None = None) -> None:
        self.testbed = testbed
        self.log_path = log_path
        self.lease = lease
        self.extra_args = list(extra_args)
        self.kubeconfig = kubeconfig or testbed.kubeconfig
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env.pop("PYTHONPATH", None)
        exe = Path(sys.executable).with_name("streamjob-operator")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                # the driver script is the image's /opt/streamjob/driver.py (the default)
                [str(exe), "--lease-namespace", "default", "--lease-name", self.lease,
                 "--lease-seconds", str(LEASE_SECONDS), "-v", *self.extra_args],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@pytest.fixture
def operator(testbed: TestBed, crd: None, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Operator]:
    op = Operator(testbed, tmp_path / "operator.log", lease=f"streamjob-e2e-{uuid.uuid4().hex[:6]}")
    op.start()
    yield op
    op.stop()
    if request.session.testsfailed:
        print(f"--- operator log {op.log_path} (tail) ---\n{op.log()[-6000:]}")


@pytest.fixture(scope="module")
def built_images(testbed: TestBed) -> str:
    """The built runtime image, also under the tag an upgrade moves to (as a user pushes a release): in buildah's
    store and in the node's."""
    assert imagestore.inspect(IMAGE) is not None, f"{IMAGE} was not built: bash scripts/build-images.sh"
    imagestore.tag(IMAGE, NEXT_IMAGE)  # moves the tag to this build
    testbed.tag_runtime_image(NEXT_IMAGE)
    return IMAGE


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A fresh host directory for a pod's hostPath volume, owned by the runtime image's user (a kubelet makes a missing
    hostPath as root, and fsGroup skips hostPath), removed after the test. Not under /tmp, where the driver pod mounts
    an emptyDir over whatever the image has."""
    path = Path("/var/tmp/streamjob-e2e") / uuid.uuid4().hex[:10]
    path.mkdir(parents=True)
    os.chown(path, RUNTIME_UID, RUNTIME_UID)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def s3_secret(core_v1: client.CoreV1Api, namespace: str, testbed: TestBed) -> str:
    assert testbed.s3 is not None
    core_v1.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="s3"),
        string_data={"AWS_ACCESS_KEY_ID": testbed.s3.access_key, "AWS_SECRET_ACCESS_KEY": testbed.s3.secret_key},
    ))
    return "s3"


def rate_job(name: str, testbed: TestBed, *, prefix: str, storage: str = "s3", **spec: Any) -> dict[str, Any]:
    """A rate source (values 0, 1, 2, ... in order) copied to json files: exactly-once means each value once."""
    assert testbed.s3 is not None
    if storage == "s3":
        checkpoint, output = f"s3a://streamjob/{prefix}/checkpoint", f"s3a://streamjob/{prefix}/output"
    else:
        checkpoint, output = f"file://{prefix}/checkpoint", f"file://{prefix}/output"
    body: dict[str, Any] = {
        "image": DEV_IMAGE,
        "statePartitions": 2,
        "checkpoint": {"location": checkpoint, "triggerInterval": "2 seconds"},
        "savepoint": {"location": f"s3://streamjob/{prefix.strip('/').replace('/', '-')}-savepoints", "timeoutSeconds": 120},
        # the operator (on the host) reads checkpoints too: an endpoint the host and pods both reach
        "s3": {"endpoint": testbed.s3_endpoint_for_pods_and_host(), "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
        "driver": {"memory": "512m", "coreRequest": CORE_REQUEST},
        "executor": {"instances": 0, "memory": "512m", "coreRequest": CORE_REQUEST},
        "restartPolicy": {"type": "ExponentialBackoff", "delaySeconds": 1, "maxDelaySeconds": 5, "maxRestarts": 5},
        "rollback": {"readinessTimeoutSeconds": 300},
        "job": {
            "pipeline": {
                "sources": [{"name": "ticks", "kind": "rate", "options": {"rowsPerSecond": "5"}}],
                "transforms": [{"name": "out", "sql": "SELECT value, timestamp FROM ticks"}],
                "sink": {"kind": "files", "format": "json", "path": output},
            }
        },
    }
    if storage != "s3":  # a file:// checkpoint needs a lasting volume mounted at it (hostPath: ``host_dir``)
        body["podTemplate"] = {"spec": {
            "containers": [{"name": "main", "volumeMounts": [{"name": "state", "mountPath": prefix}]}],
            "volumes": [{"name": "state", "hostPath": {"path": prefix, "type": "DirectoryOrCreate"}}],
        }}
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "StreamJob", "metadata": {"name": name}, "spec": body}


class Jobs:
    """Reads and changes StreamJobs of one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def apply(self, manifest: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL, manifest)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL, name)

    def get(self, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL, name)
        return obj

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def wait(self, name: str, what: str, probe: Callable[[dict[str, Any]], bool], timeout: float = START_TIMEOUT) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            st = self.status(name)
            return st if probe(st) else None

        try:
            return wait_for(check, timeout, f"{self.namespace}/{name}: {what}", interval=0.5)
        except AssertionError as err:
            raise AssertionError(f"{err}\nstatus: {json.dumps(self.status(name), indent=1)[-3000:]}\n"
                                 f"events: {self.events(name)}") from None

    def wait_ready(self, name: str, timeout: float = START_TIMEOUT, **fields: Any) -> dict[str, Any]:
        return self.wait(name, f"Running and ready {fields}", lambda st: st.get("state") == LifecycleState.running and st.get("ready") is True
                         and st.get("operation") is None and all(st.get(k) == v for k, v in fields.items()), timeout)

    def events(self, name: str) -> list[tuple[str, str]]:
        items = self.core.list_namespaced_event(self.namespace, field_selector=f"involvedObject.name={name}").items
        items.sort(key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name))
        return [(e.reason, e.message) for e in items if e.source and e.source.component == "streamjob-operator"]

    def reasons(self, name: str) -> list[str]:
        return [r for r, _ in self.events(name)]

    def wait_event(self, name: str, reason: str, timeout: float = 30.0) -> list[str]:
        """The messages of the job's events with this reason, once there is one.

        The operator posts a pass's events after that pass's status write (the write-ahead log comes first),
        so a test that has just seen a status must wait for the event of the same pass, not read it at once.
        """
        return wait_for(lambda: [m for r, m in self.events(name) if r == reason], timeout,
                        f"{self.namespace}/{name}: a {reason} event (events: {self.events(name)})")

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next(c for c in self.status(name).get("conditions", []) if c["type"] == type_)

    def driver_pods(self, name: str) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=f"streamjob.io/job={name},streamjob.io/role=driver").items)


@pytest.fixture
def jobs(kube_api: client.ApiClient, namespace: str) -> Jobs:
    return Jobs(kube_api, namespace)


class ListThenWatch:
    """Lists once, then watches from the last resourceVersion seen, in a thread of its own.

    A watch started "from now" every few seconds misses what happened between two requests; this one
    resumes where it left off and lists again only when the API server says that version is gone (410).
    Subclasses say what to list and watch (``_list``, ``_watched``) and what to keep (``_listed``, ``_event``).
    """

    def __init__(self) -> None:
        self.relists = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _list(self) -> tuple[list[Any], str]:
        raise NotImplementedError

    def _watched(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        raise NotImplementedError

    def _listed(self, items: list[Any]) -> None:
        raise NotImplementedError

    def _event(self, kind: str, obj: Any) -> str:
        """Keeps one watch event; returns the object's resourceVersion."""
        raise NotImplementedError

    def _run(self) -> None:
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    items, rv = self._list()
                    self.relists += 1
                    self._listed(items)
                func, args, kwargs = self._watched()
                for ev in watch.Watch().stream(func, *args, resource_version=rv, timeout_seconds=5, **kwargs):
                    rv = self._event(ev["type"], ev["object"])
                    if self._stop.is_set():
                        break
            except ApiException as err:
                if err.status == 410:
                    rv = None  # too old: list again
                else:
                    time.sleep(0.5)
            except Exception:
                time.sleep(0.5)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class DriverCounter(ListThenWatch):
    """Watches driver pods and remembers the most that ever existed at once (the claim: never two);
    no deletion is missed (ListThenWatch), so the next driver is never counted as a second one."""

    SELECTOR = "streamjob.io/role=driver"

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__()
        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.alive: set[str] = set()
        self.max_seen = 0
        self.history: list[tuple[str, str]] = []

    def _list(self) -> tuple[list[Any], str]:
        listing = self.core.list_namespaced_pod(self.namespace, label_selector=self.SELECTOR)
        return list(listing.items), listing.metadata.resource_version

    def _watched(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        return self.core.list_namespaced_pod, (self.namespace,), {"label_selector": self.SELECTOR}

    def _listed(self, items: list[Any]) -> None:
        self.alive = {p.metadata.name for p in items}
        self.history.extend(("LISTED", name) for name in sorted(self.alive))
        self.max_seen = max(self.max_seen, len(self.alive))

    def _event(self, kind: str, obj: Any) -> str:
        name = obj.metadata.name
        if kind == "DELETED":
            self.alive.discard(name)
        else:
            self.alive.add(name)
        self.history.append((kind, name))
        self.max_seen = max(self.max_seen, len(self.alive))
        return str(obj.metadata.resource_version)

    def __enter__(self) -> DriverCounter:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class JobWatch(ListThenWatch):
    """Records every version of the StreamJobs of one namespace that the API server stored, in order.

    A poll sees a state only when it happens to land inside it, and a transient state (Deploying, an
    operation's phase) can be over between two polls. The operator writes each state to status before it
    acts on it (the write-ahead log), so each one is a stored version, and a watch is sent every stored
    version: what is recorded here is the job's whole history (ListThenWatch; after a relist, counted in
    ``relists``, versions between the two may be missing).
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__()
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._versions: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _record(self, obj: dict[str, Any]) -> None:
        with self._lock:
            meta = obj.get("metadata") or {}
            key = (meta.get("name"), meta.get("resourceVersion"))
            if not any((v["metadata"]["name"], v["metadata"].get("resourceVersion")) == key for v in self._versions[-50:]):
                self._versions.append(json.loads(json.dumps(obj)))

    def _list(self) -> tuple[list[Any], str]:
        listing = self.custom.list_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, PLURAL)
        return list(listing.get("items", [])), listing["metadata"]["resourceVersion"]

    def _watched(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        return self.custom.list_namespaced_custom_object, (API_GROUP, API_VERSION, self.namespace, PLURAL), {}

    def _listed(self, items: list[Any]) -> None:
        for obj in items:
            self._record(obj)

    def _event(self, kind: str, obj: Any) -> str:
        if kind in ("ADDED", "MODIFIED"):
            self._record(obj)
        return str(obj["metadata"]["resourceVersion"])

    def versions(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [v for v in self._versions if v["metadata"]["name"] == name]

    def history(self) -> list[dict[str, Any]]:
        """Every recorded version of every job of the namespace, in the order the API server stored them."""
        with self._lock:
            return list(self._versions)

    def transitions(self, name: str) -> list[tuple[str | None, str | None]]:
        """(status.state, status.operation.kind) each time either changed, in order."""
        out: list[tuple[str | None, str | None]] = []
        for v in self.versions(name):
            st = v.get("status") or {}
            now = (st.get("state"), (st.get("operation") or {}).get("kind"))
            if not out or out[-1] != now:
                out.append(now)
        return out

    def recorded(self, name: str, what: str, probe: Callable[[dict[str, Any]], bool], timeout: float = 30.0,
                 since: int = 0) -> list[dict[str, Any]]:
        """Every recorded version of the job (from the ``since``-th on) whose status matches ``probe``, once there
        is one; the wait is for the watch to catch up, or for a state the job passes through however briefly."""
        try:
            return wait_for(lambda: [v for v in self.versions(name)[since:] if probe(dict(v.get("status") or {}))], timeout,
                            f"{self.namespace}/{name}: a recorded version {what}", interval=0.05)
        except AssertionError as err:
            raise AssertionError(f"{err}\ntransitions: {self.transitions(name)}; relists: {self.relists}") from None

    def __enter__(self) -> JobWatch:
        self.start()
        wait_for(lambda: self.relists >= 0, 30, f"the watch of StreamJobs in {self.namespace} to list")
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@pytest.fixture
def drivers(kube_api: client.ApiClient, namespace: str) -> Iterator[DriverCounter]:
    with DriverCounter(kube_api, namespace) as counter:
        yield counter
    assert counter.max_seen <= 1, f"two driver pods existed at once: {counter.history}"


def assert_runs_in_image(testbed: TestBed, namespace: str, pod: str, uid: int = RUNTIME_UID, container: str | None = None) -> None:
    """The pod's container process runs inside its image's root filesystem, as the image's user.

    uid 185 is the top-level Dockerfile's USER, 65532 images/operator/Dockerfile's; containerd runs every container in
    its image, in a mount namespace of its own.
    """
    pid = testbed.container_pid(namespace, pod, container)
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"), f"{namespace}/{pod} shares the host's mounts"
    uids = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:"))
    assert int(uids[0]) == uid, f"{namespace}/{pod} runs as uid {uids[0]}, not {uid}"


def kill_driver_process(testbed: TestBed, namespace: str, pod: str) -> None:
    """SIGKILL the driver's processes, as an OOM kill would (the pod then fails with 137)."""
    testbed.signal_pod(namespace, pod, signal.SIGKILL)


def signal_driver_process(testbed: TestBed, namespace: str, pod: str, sig: signal.Signals) -> None:
    """Sends ``sig`` to the driver's processes on its node (SIGSTOP: a frozen driver, as on a lost node)."""
    testbed.signal_pod(namespace, pod, sig)


def output_values(s3: Any, prefix: str) -> list[int]:
    """Values committed by Spark's file sink under s3://streamjob/<prefix>/output, read through its _spark_metadata log."""
    meta_prefix = f"{prefix}/output/_spark_metadata/"
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket="streamjob", Prefix=meta_prefix)
            for o in page.get("Contents", [])]
    files: set[str] = set()
    for key in sorted(keys):
        if key.rsplit("/", 1)[-1].startswith("."):
            continue
        body = s3.get_object(Bucket="streamjob", Key=key)["Body"].read().decode()
        for line in body.splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"])
    values: list[int] = []
    for path in files:
        key = path.split("streamjob/", 1)[1]
        for line in s3.get_object(Bucket="streamjob", Key=key)["Body"].read().decode().splitlines():
            if line.strip():
                values.append(int(json.loads(line)["value"]))
    return values


def file_output_values(prefix: str) -> list[int]:
    root = Path(prefix) / "output"
    files: set[str] = set()
    for meta in sorted((root / "_spark_metadata").glob("[0-9]*")):
        for line in meta.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"])
    values: list[int] = []
    for path in files:
        for line in Path(path.removeprefix("file:")).read_text().splitlines():
            if line.strip():
                values.append(int(json.loads(line)["value"]))
    return values


def assert_exactly_once(values: list[int]) -> None:
    assert values, "no output"
    dupes = len(values) - len(set(values))
    missing = sorted(set(range(max(values) + 1)) - set(values))
    assert dupes == 0 and not missing, f"{dupes} duplicates; missing {missing[:20]} (of {len(missing)}); max {max(values)}"


def savepoint_manifest(s3: Any, uri: str) -> dict[str, Any] | None:
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    try:
        data: dict[str, Any] = json.loads(s3.get_object(Bucket=bucket, Key=f"{key}/_savepoint.json")["Body"].read())
        return data
    except s3.exceptions.NoSuchKey:
        return None


class S3Switch:
    """Stops the test bed's S3 server and starts it again on the same port and data (its process is ours)."""

    def __init__(self, testbed: TestBed) -> None:
        self.testbed = testbed

    def _proc(self) -> ManagedProcess:
        return next(p for p in self.testbed._processes if p.name == "versitygw")

    def stop(self) -> None:
        self._proc().stop()

    def start(self) -> None:
        old = self._proc()
        new = ManagedProcess("versitygw", old.argv, old.log_path)
        self.testbed._processes[self.testbed._processes.index(old)] = new
        s3 = self.testbed.s3_client()
        new.wait_ready(lambda: isinstance(s3.list_buckets().get("Buckets"), list), 60, "serving S3 again")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()

