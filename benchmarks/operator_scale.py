"""Operator scale benchmark: one operator, 1,000 StreamJobs (a few with real drivers, the rest simulated).

Run: `python benchmarks/operator_scale.py [--jobs 1000] [--real 2] [--report docs/benchmarks/operator-scale.md]`
(with the editable install, the test bed's binaries and the images scripts/build-images.sh built; as root;
builds kwok once with `testbed/build/build-kwok.sh`; starts its own test bed, with the real node; 1,000 jobs
took over 50 minutes on a shared 2-CPU machine, 50 jobs about 20, before the move to the real node).

Design, and why:

- **The operator** runs from its Helm chart as a pod on the test bed's real node (a container of
  the built operator image), under its own ServiceAccount, so the API server's audit log counts its
  requests (as ``operator_load.py``); its CPU and RSS are read from /proc of its container's
  process (``TestBed.container_pid``: the host sees a container's processes). Its pod runs on the
  host's network (``hostNetwork``, patched into the chart's Deployment, which has no such value)
  so that it reaches the simulated drivers' loopback addresses (below). Its Lease is
  ``--lease-seconds`` (60; the chart's 15 s default made it step down while the API server was
  slow with the 1,000 creations, see the report). On the host's network its ports are the
  host's (free ones are chosen), so when its pod is deleted the scheduler places the
  replacement only once the old pod is gone.
- **A few real drivers** (``--real``, default 2): ordinary StreamJobs whose driver pods run on the
  real node (containers of the built runtime image: a Spark driver in local mode, rate source,
  console sink). Each asks ``CORE_REQUEST`` (250m) of the node's CPUs, which are this machine's 2:
  7 fit beside the operator's 100m; the run counts how many fit, refuses a larger ``--real`` and
  the report says the figure.
- **The rest are simulated, by a load generator.** 1,000 JVMs do not fit on 2 cores, nor
  1,000 pod sandboxes on one kubelet. Their pods go to a kwok node (``sigs.k8s.io/kwok``, the
  tool controller authors use at this scale: it plays a node and its pods' lifecycle,
  Pending -> Running with an IP -> deleted, and runs no process). The jobs' pod template pins
  ``nodeName`` to the kwok node (simplest: the test bed's kube-scheduler leaves a pod with a node
  alone); the kwok node is tainted ``NoSchedule``, so the scheduler puts neither the operator nor a
  real driver there. The kwok node's pod CIDR is on loopback
  (127.128.0.0/16: Linux routes all of 127/8 to lo), so every address the operator dials is
  local to the host, and the load generator (``benchmarks/loadgen.py``, one asyncio process on
  the host) listens on each simulated pod's address at the control port and answers ``GET /status``
  from a fixture (RUNNING, a batch id that advances), checking the job's bearer token.
- **Phases, one run**: create every job at once -> all Ready (the Spark operator's
  figure for 1,000 applications is 340 s); idle window (operator CPU, RSS, requests/s
  from the audit log); operator restart (its pod deleted -> every simulated job polled by
  the new operator and every job Ready); failure reaction of the real drivers (SIGKILL of
  every process of the driver's container, through containerd: ``TestBed.signal_pod`` -> the
  operator deletes the failed pod or creates its replacement, seen by a pod watch; p99 over
  ``--kills`` rounds); a rolling upgrade of every job (an image tag change, a tag of the built
  runtime image in the node's store, ``upgradeMode: last-state``) under the operator's
  ``--max-concurrent-upgrades`` (``--max-concurrent-upgrades`` here, the chart's default
  otherwise), with the most jobs recording an upgrade or rollback at once, from every
  status version the watch sees.

Everything it starts (test bed, kwok, load generator, operator pod) is stopped on exit,
failure or Ctrl-C: the processes are children tied to this one (``testbed.proc``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client, watch

import job_runtime
from operator_bench import CORE_REQUEST, IMAGE, bench_image
from operator_load import OPERATOR_PODS, cpu_seconds, helm, rss_mb
from report import machine, publish, reproduce
from streamjob_operator.progress import DEFAULT_POLLS_PER_SECOND, DEFAULT_WRITES_PER_SECOND
from streamjob_operator.slots import DEFAULT_LIMIT
from testbed import TestBed
from testbed.proc import ManagedProcess, free_port
from testbed.waiting import wait_for

REPO = Path(job_runtime.__file__).resolve().parents[1]
NS = "scale"
RELEASE_NS = "streamjob-scale"
OPERATOR_USER = f"system:serviceaccount:{RELEASE_NS}:streamjob-operator"
OPERATOR = "streamjob-operator"  # the chart's Deployment
KWOK_NODE = "kwok-node"
POD_CIDR = "127.128.0.0/16"
CONTROL_PORT = 8765
GROUP, VERSION, PLURAL = "streamjob.io", "v1alpha1", "streamjobs"
SAMPLE_SECONDS = 2.0  # between looks at the jobs' statuses (kept by a watch) while waiting


def log(msg: str) -> None:
    print(f"{datetime.now(timezone.utc):%H:%M:%S} {msg}", flush=True)


# --- the pieces: kwok, its node, the load generator, the operator ------------------------------


def kwok_binary() -> Path:
    done = subprocess.run(["bash", str(REPO / "testbed" / "build" / "build-kwok.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"kwok could not be built:\n{done.stderr.strip()}")
    return Path(done.stdout.strip().splitlines()[-1])


def kwok_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": KWOK_NODE, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": KWOK_NODE, "kubernetes.io/os": "linux"}},
        # tainted: the scheduler puts nothing here; the simulated drivers name it (nodeName)
        "spec": {"podCIDR": POD_CIDR, "podCIDRs": [POD_CIDR],
                 "taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "5000"},
                   "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "5000"}},
    }


def start_kwok(bed: TestBed, binary: Path) -> ManagedProcess:
    return ManagedProcess("kwok", [
        str(binary), f"--kubeconfig={bed.kubeconfig}", "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", f"--cidr={POD_CIDR}",
        "--node-ip=127.0.0.1", "--server-address=127.0.0.1:0", f"--config={binary.parent / 'stages.yaml'}",
    ], bed.log_dir / "kwok.log")


def start_loadgen(bed: TestBed, stats_port: int) -> ManagedProcess:
    return ManagedProcess("loadgen", [
        sys.executable, str(REPO / "benchmarks" / "loadgen.py"), f"--kubeconfig={bed.kubeconfig}", f"--node={KWOK_NODE}",
        f"--port={CONTROL_PORT}", f"--stats=127.0.0.1:{stats_port}",
    ], bed.log_dir / "loadgen.log")


def loadgen_stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=30) as reply:
        return dict(json.loads(reply.read()))


def loadgen_up(port: int) -> bool:
    try:
        return bool(loadgen_stats(port))
    except OSError:
        return False


def install_operator(bed: TestBed, api: client.ApiClient, args: argparse.Namespace) -> None:
    """The chart's operator, its pod on the host's network: it dials each simulated driver at a loopback address
    of the host, which a pod's own network does not reach (testbed.podnet: only the bridge's address leads out).
    The chart has no such value, so it is installed with no replica, its Deployment patched, then scaled to one."""
    helm(bed, "upgrade", "--install", "streamjob", str(REPO / "charts" / "streamjob"), "--namespace", RELEASE_NS,
         "--create-namespace", "--set", f"watchNamespaces={{{NS}}}", "--set", "driverServiceAccount.create=false",
         "--set", f"leaderElection.leaseSeconds={args.lease_seconds}",
         "--set", f"leaderElection.renewDeadlineSeconds={args.lease_seconds * 2 // 3}",
         "--set", f"reconcile.maxConcurrentUpgrades={args.max_concurrent_upgrades}",
         # the host's ports then: free ones rather than the chart's 8080 and 9090
         "--set", f"livenessPort={free_port()}", "--set", f"metrics.port={free_port()}",
         "--set", "replicas=0", "--wait", "--timeout", "240s")
    client.AppsV1Api(api).patch_namespaced_deployment(
        OPERATOR, RELEASE_NS, {"spec": {"replicas": 1, "template": {"spec": {"hostNetwork": True}}}})
    core = client.CoreV1Api(api)
    wait_for(lambda: [p for p in operator_pods(core) if any(c.type == "Ready" and c.status == "True"
                                                             for c in p.status.conditions or [])],
             240, "the operator pod Ready")


def operator_pods(core: client.CoreV1Api) -> list[Any]:
    return [p for p in core.list_namespaced_pod(RELEASE_NS, label_selector=OPERATOR_PODS).items
            if not p.metadata.deletion_timestamp]


def millicores(quantity: str) -> int:
    """A CPU quantity (2, 1.5, 250m) in millicores."""
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def drivers_that_fit(core: client.CoreV1Api, node: str) -> int:
    """How many real drivers, CORE_REQUEST of CPU each, the node's allocatable CPU holds beside what its pods
    request already (the operator's)."""
    allocatable = millicores(core.read_node(node).status.allocatable["cpu"])
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    requested = sum(millicores(((c.resources and c.resources.requests) or {}).get("cpu", "0"))
                    for p in pods if p.status.phase not in ("Succeeded", "Failed") for c in p.spec.containers)
    return (allocatable - requested) // millicores(CORE_REQUEST)


def operator_requests(audit_log: Path, since: float, until: float) -> Counter[str]:
    """The operator's requests received in [since, until) (epoch seconds), by "verb resource"."""
    counts: Counter[str] = Counter()
    needle = OPERATOR_USER.encode()
    with open(audit_log, "rb") as lines:
        for line in lines:
            if needle not in line:
                continue
            event = json.loads(line)
            if event.get("stage") != "ResponseStarted" and event.get("verb") == "watch":
                continue
            if event.get("stage") not in ("ResponseStarted", "ResponseComplete") or event["user"]["username"] != OPERATOR_USER:
                continue
            at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if since <= at < until:
                ref = event.get("objectRef") or {}
                resource = ref.get("resource", "(non-resource)") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
                counts[f"{event['verb']} {resource}"] += 1
    return counts


# --- the jobs ----------------------------------------------------------------------------------


def job(bed: TestBed, name: str, simulated: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": IMAGE, "upgradeMode": "last-state",
        "checkpoint": {"location": f"s3a://streamjob/checkpoints/scale/{name}", "triggerInterval": "5 seconds"},
        # the operator (on the host's network) and the real drivers (pods) both reach it
        "s3": {"endpoint": bed.s3_endpoint_for_pods_and_host(), "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
        "driver": {"memory": "512m", "coreRequest": CORE_REQUEST}, "executor": {"instances": 0},
        "restartPolicy": {"type": "FixedDelay", "delaySeconds": 0, "maxRestarts": 100},
        "job": {"pipeline": {"sources": [{"name": "events", "kind": "rate", "options": {"rowsPerSecond": "1"}}],
                             "sink": {"kind": "console"}}},
    }
    if simulated:  # a kwok pod: the template names the node, and the scheduler leaves it alone
        spec["podTemplate"] = {"metadata": {"labels": {"scale.streamjob.io/load": "simulated"}},
                               "spec": {"nodeName": KWOK_NODE}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "StreamJob", "metadata": {"name": name, "namespace": NS}, "spec": spec}


_local = threading.local()


def threaded(bed: TestBed) -> client.CustomObjectsApi:
    """One client per thread of a pool."""
    if not hasattr(_local, "custom"):
        _local.custom = client.CustomObjectsApi(bed.api_client())
    return _local.custom  # type: ignore[no-any-return]


class StatusWatch:
    """Every StreamJob's status, kept by one watch: a LIST of 1,000 jobs every few seconds (megabytes
    the API server serializes each time) loaded the API server the operator is measured against."""

    def __init__(self, bed: TestBed) -> None:
        self.custom = client.CustomObjectsApi(bed.api_client())
        self.items: dict[str, dict[str, Any]] = {}
        self.upgrading: set[str] = set()  # jobs whose status records an upgrade or rollback
        self.peak_upgrading = 0  # the most at once since reset_peak, over every version the watch delivered
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self.run, name="status-watch", daemon=True).start()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                listing = self.custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, resource_version="0")
                with self.lock:
                    self.items = {i["metadata"]["name"]: dict(i.get("status") or {}) for i in listing["items"]}
                    for name, st in self.items.items():
                        self._count(name, st)
                w = watch.Watch()
                for ev in w.stream(self.custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                   resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=240):
                    obj = ev["object"]
                    if ev["type"] == "ERROR" or self.stopped.is_set():
                        break
                    with self.lock:
                        if ev["type"] == "DELETED":
                            self.items.pop(obj["metadata"]["name"], None)
                            self._count(obj["metadata"]["name"], {})
                        else:
                            self.items[obj["metadata"]["name"]] = dict(obj.get("status") or {})
                            self._count(obj["metadata"]["name"], self.items[obj["metadata"]["name"]])
            except Exception as exc:  # a dropped watch: list again
                log(f"status watch restarted: {exc}")
                time.sleep(1)

    def _count(self, name: str, status: dict[str, Any]) -> None:
        if (status.get("operation") or {}).get("kind") in ("upgrade", "rollback"):
            self.upgrading.add(name)
        else:
            self.upgrading.discard(name)
        self.peak_upgrading = max(self.peak_upgrading, len(self.upgrading))

    def reset_peak(self) -> None:
        with self.lock:
            self.peak_upgrading = len(self.upgrading)

    def peak(self) -> int:
        with self.lock:
            return self.peak_upgrading

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return dict(self.items)


_watch: StatusWatch | None = None


def statuses(custom: client.CustomObjectsApi) -> dict[str, dict[str, Any]]:
    """Each job's status, from the watch once it runs."""
    if _watch is not None:
        return _watch.snapshot()
    items = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)["items"]
    return {i["metadata"]["name"]: dict(i.get("status") or {}) for i in items}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


# --- phases ------------------------------------------------------------------------------------


def create_all(bed: TestBed, custom: client.CustomObjectsApi, names: list[str], real: set[str]) -> dict[str, Any]:
    """Every job created at once (8 client threads); seconds until each is Ready."""
    started = time.time()
    ready_at: dict[str, float] = {}

    def create(name: str) -> None:
        threaded(bed).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, job(bed, name, name not in real))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))
    created = time.time()
    log(f"created {len(names)} jobs in {created - started:.1f}s")
    deadline = time.monotonic() + 1800
    while len(ready_at) < len(names) and time.monotonic() < deadline:
        now = time.time()
        for name, st in statuses(custom).items():
            if st.get("ready") and name not in ready_at:
                ready_at[name] = now - started
        log(f"ready {len(ready_at)}/{len(names)} at {now - started:.0f}s")
        time.sleep(SAMPLE_SECONDS)
    sim = [v for k, v in ready_at.items() if k not in real]
    return {
        "create_requests_s": round(created - started, 1),
        "all_ready_s": round(max(ready_at.values()), 1) if len(ready_at) == len(names) else None,
        "ready": len(ready_at),
        "simulated_ready_p50_s": round(statistics.median(sim), 1) if sim else None,
        "real_ready_s": {k: round(v, 1) for k, v in ready_at.items() if k in real},
    }


def idle(bed: TestBed, core: client.CoreV1Api, stats_port: int, warmup: float, window: float) -> dict[str, Any]:
    time.sleep(warmup)
    pod = operator_pods(core)[0].metadata.name
    pid = bed.container_pid(RELEASE_NS, pod)
    calls0 = loadgen_stats(stats_port)["calls"]
    since, cpu0 = time.time(), cpu_seconds(pid)
    time.sleep(window)
    cpu1, until = cpu_seconds(pid), time.time()
    calls1 = loadgen_stats(stats_port)["calls"]
    time.sleep(3)  # the audit log's writer catches up
    counts = operator_requests(bed.audit_log, since, until)
    return {
        "window_s": window, "warmup_s": warmup,
        "cpu_cores": round((cpu1 - cpu0) / window, 3), "rss_mb": round(rss_mb(pid), 1),
        "requests_per_s": round(sum(counts.values()) / window, 2),
        "by_request_per_s": {k: round(v / window, 2) for k, v in counts.most_common()},
        "driver_status_calls_per_s": round((calls1 - calls0) / window, 1),
    }


def failure_reaction(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, real: list[str],
                     rounds: int) -> dict[str, Any]:
    """Each round SIGKILLs every real driver's container, one after the other; per kill: -> pod Failed (the kubelet),
    -> the operator's first reaction (the failed pod deleted or a replacement created), both seen by one pod watch."""
    samples: list[dict[str, Any]] = []
    for rnd in range(rounds):
        victims: dict[str, str] = {}
        for name in real:
            st = wait_for(lambda n=name: (s := statuses(custom).get(n) or {}).get("ready") and s, 900, f"{name} ready")
            victims[name] = st["driverPod"]
        time.sleep(3)
        seen: dict[str, dict[str, float]] = {n: {} for n in real}
        w = watch.Watch()
        rv = core.list_namespaced_pod(NS, label_selector="streamjob.io/role=driver").metadata.resource_version
        done = threading.Event()

        def watcher() -> None:
            for ev in w.stream(core.list_namespaced_pod, NS, label_selector="streamjob.io/role=driver",
                               resource_version=rv, timeout_seconds=300):
                now, pod = time.time(), ev["object"]
                job_name = (pod.metadata.labels or {}).get("streamjob.io/job")
                if job_name not in seen:
                    continue
                marks = seen[job_name]
                if pod.metadata.name == victims[job_name]:
                    if pod.status and pod.status.phase == "Failed":
                        marks.setdefault("failed", now)
                    if pod.metadata.deletion_timestamp or ev["type"] == "DELETED":
                        marks.setdefault("reacted", now)
                elif ev["type"] == "ADDED":
                    marks.setdefault("reacted", now)
                    marks.setdefault("replacement", now)
                if all("reacted" in m for m in seen.values()) or done.is_set():
                    w.stop()
                    return

        thread = threading.Thread(target=watcher, daemon=True)
        thread.start()
        time.sleep(1)
        killed: dict[str, float] = {}
        for name, pod in victims.items():
            bed.signal_pod(NS, pod, signal.SIGKILL)
            killed[name] = time.time()  # ctr has returned: the kill is sent (the pod's read and ctr's start came before)
        thread.join(120)
        done.set()
        for name in real:
            m = seen[name]
            samples.append({"round": rnd, "job": name,
                            "to_failed_s": round(m["failed"] - killed[name], 3) if "failed" in m else None,
                            "reaction_s": round(m["reacted"] - killed[name], 3) if "reacted" in m else None})
        log(f"kill round {rnd}: {samples[-len(real):]}")
    reactions = [s["reaction_s"] for s in samples if s["reaction_s"] is not None]
    operator_share = [s["reaction_s"] - s["to_failed_s"] for s in samples if s["reaction_s"] is not None and s["to_failed_s"] is not None]
    return {"samples": samples, "p50_s": round(statistics.median(reactions), 3) if reactions else None,
            "p99_s": round(percentile(reactions, 99), 3) if reactions else None,
            "max_s": round(max(reactions), 3) if reactions else None, "missed": len(samples) - len(reactions),
            "after_pod_failed_p50_s": round(statistics.median(operator_share), 3) if operator_share else None}


def restart(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, stats_port: int,
            names: list[str]) -> dict[str, Any]:
    """The operator's pod deleted (as a rollout or an eviction would): until the new one has polled every
    simulated job's driver and every job is Ready in status (first every job Ready: a killed real driver's
    replacement cold-starts)."""
    wait_for(lambda: all(s.get("ready") for s in statuses(custom).values()), 900, "every job Ready before the restart")
    time.sleep(5)
    old = operator_pods(core)[0].metadata.name
    deleted = time.time()
    core.delete_namespaced_pod(old, RELEASE_NS)

    def old_gone() -> bool:
        try:
            core.read_namespaced_pod(old, RELEASE_NS)
            return False
        except client.ApiException as err:
            return err.status == 404

    wait_for(old_gone, 120, "the old operator pod gone")
    gone = time.time()
    mark = loadgen_stats(stats_port)["now"]  # on the load generator's clock: later calls are the new operator's
    new = wait_for(lambda: [p for p in operator_pods(core) if p.status.phase == "Running"], 120, "the new operator pod")[0]
    started = new.status.start_time.timestamp() if new.status.start_time else gone
    polled_at = ready_at = None
    while time.time() - deleted < 900:
        stats = loadgen_stats(stats_port)
        polled = sum(1 for j in stats["jobs"].values() if j["last_call"] and j["last_call"] > mark)
        if polled_at is None and polled >= stats["pods"]:
            polled_at = time.time()
        sts = statuses(custom)
        ready = sum(1 for n in names if (sts.get(n) or {}).get("ready") and not (sts.get(n) or {}).get("operation"))
        if polled_at is not None and ready == len(names):
            ready_at = time.time()
            break
        log(f"restart: polled {polled}/{stats['pods']}, ready {ready}/{len(names)}")
        time.sleep(2)
    converged = max(polled_at or 0, ready_at or 0) if polled_at and ready_at else None
    return {"old_pod_gone_s": round(gone - deleted, 1), "new_pod_started_s": round(started - deleted, 1),
            "converged_after_delete_s": round(converged - deleted, 1) if converged else None,
            "converged_after_new_start_s": round(converged - max(started, gone), 1) if converged else None}


def rolling_upgrade(bed: TestBed, custom: client.CustomObjectsApi, names: list[str]) -> dict[str, Any]:
    """Every job's image tag changed at once; until every job runs a new driver, Ready; jobs in flight sampled."""
    before = {n: s.get("driverPod") for n, s in statuses(custom).items()}
    new_image = bench_image(bed, "0.1.1")
    assert _watch is not None
    _watch.reset_peak()
    started = time.time()

    def patch(name: str) -> None:
        threaded(bed).patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, {"spec": {"image": new_image}})

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(patch, names))
    patched = time.time()
    in_flight_max, done_at = 0, None
    samples = []
    while time.time() - started < 1800:
        sts = statuses(custom)
        upgrading = sum(1 for s in sts.values() if (s.get("operation") or {}).get("kind") in ("upgrade", "rollback"))
        done = sum(1 for n in names if sts[n].get("ready") and not sts[n].get("operation")
                   and sts[n].get("driverPod") not in (None, before.get(n)))
        in_flight_max = max(in_flight_max, upgrading)
        samples.append((round(time.time() - started), upgrading, done))
        log(f"upgrade: in flight {upgrading}, done {done}/{len(names)}")
        if done == len(names):
            done_at = time.time()
            break
        time.sleep(SAMPLE_SECONDS)
    return {"patch_requests_s": round(patched - started, 1), "all_upgraded_s": round(done_at - started, 1) if done_at else None,
            "max_in_flight": in_flight_max, "peak_upgrading": _watch.peak(), "samples": samples[:: max(1, len(samples) // 20)]}


# --- main --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    kwok = kwok_binary()
    assert ipaddress.ip_network(POD_CIDR).subnet_of(ipaddress.ip_network("127.0.0.0/8"))  # type: ignore[arg-type]
    result: dict[str, Any] = {"jobs": args.jobs, "real": args.real, "kwok": kwok.parent.name,
                              "lease_seconds": args.lease_seconds, "max_concurrent_upgrades": args.max_concurrent_upgrades,
                              "driver_polls_per_second": DEFAULT_POLLS_PER_SECOND,
                              "progress_writes_per_second": DEFAULT_WRITES_PER_SECOND}
    with TestBed(Path(tempfile.mkdtemp(prefix="scale-testbed-")), kafka=False) as bed:
        assert bed.s3 is not None
        bed.tag_runtime_image(IMAGE)
        api = bed.api_client()
        core, custom, ext = client.CoreV1Api(api), client.CustomObjectsApi(api), client.ApiextensionsV1Api(api)
        import yaml

        for path in (REPO / "crds").glob("*.yaml"):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        core.create_node(kwok_node())
        extra: list[ManagedProcess] = []
        try:
            extra.append(start_kwok(bed, kwok))
            stats_port = free_port()
            extra.append(start_loadgen(bed, stats_port))
            wait_for(lambda: any(c.type == "Ready" and c.status == "True"
                                 for c in core.read_node(KWOK_NODE).status.conditions or []), 60, "the kwok node Ready")
            wait_for(lambda: loadgen_up(stats_port), 120, "the load generator")
            time.sleep(2)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
            wait_for(lambda: core.read_namespaced_service_account("default", NS), 30, "default SA")
            core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="s3"), string_data={
                "AWS_ACCESS_KEY_ID": bed.s3.access_key, "AWS_SECRET_ACCESS_KEY": bed.s3.secret_key}))
            install_operator(bed, api, args)
            log("operator installed")
            fit = drivers_that_fit(core, bed.node_name)
            result.update(real_driver_cpu=CORE_REQUEST, real_drivers_fit=fit,
                          node_cpu=core.read_node(bed.node_name).status.allocatable["cpu"])
            if args.real > fit:
                raise SystemExit(f"--real {args.real}: {fit} drivers at {CORE_REQUEST} CPU fit on node {bed.node_name} "
                                 "beside the operator")
            real = [f"real-{i}" for i in range(args.real)]
            names = real + [f"sim-{i:04d}" for i in range(args.jobs - args.real)]
            global _watch
            _watch = StatusWatch(bed)
            result["create"] = create_all(bed, custom, names, set(real))
            log(f"create: {result['create']}")
            result["idle"] = idle(bed, core, stats_port, args.warmup, args.window)
            log(f"idle: {result['idle']}")
            result["restart"] = restart(bed, core, custom, stats_port, names)
            log(f"restart: {result['restart']}")
            result["failure"] = failure_reaction(bed, core, custom, real, args.kills)
            log(f"failure: {result['failure']}")
            result["upgrade"] = rolling_upgrade(bed, custom, names)
            log(f"upgrade: {result['upgrade']}")
            result["loadgen_unauthorized"] = loadgen_stats(stats_port)["unauthorized"]
            result["states_at_end"] = dict(Counter(s.get("state") for s in statuses(custom).values()))
            result["load_average"] = [round(x, 1) for x in os.getloadavg()]
        finally:
            for proc in reversed(extra):
                proc.stop()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--real", type=int, default=2, help="jobs with a real driver (the rest are simulated)")
    parser.add_argument("--kills", type=int, default=3, help="failure rounds (each kills every real driver)")
    parser.add_argument("--lease-seconds", type=int, default=60,
                        help="the chart's leaderElection.leaseSeconds (renewDeadlineSeconds: two thirds of it); see the report")
    parser.add_argument("--max-concurrent-upgrades", type=int, default=DEFAULT_LIMIT,
                        help="the chart's reconcile.maxConcurrentUpgrades for the rolling upgrade (0: no bound)")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=120.0)
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "benchmarks" / "operator-scale.md")
    parser.add_argument("--from-json", type=Path, help="write the report from a run's saved figures (operator-scale.json)")
    args = parser.parse_args()
    if args.from_json:
        write_report(args.report, json.loads(args.from_json.read_text()), args)
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: every component stopped
    results = run(args)
    print(json.dumps(results, indent=2))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    (args.report.parent / (args.report.stem + ".json")).write_text(json.dumps(results, indent=2))
    write_report(args.report, results, args)
    return 0


def verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**missed**")


NOT_RUN = "not measured in this run"
SETTING_BEFORE = """This run predates `--max-concurrent-upgrades`: the operator measured started every changed job's upgrade on
its next pass (`reconcile.workers`, 16 threads, bounds passes in flight, not upgrades). The setting (chart value
`reconcile.maxConcurrentUpgrades`, default 10) came after it and is not measured at this scale yet."""
SETTING_NOW = """The rolling upgrade runs under `--max-concurrent-upgrades` (docs/operations.md, "Many jobs at once"): every
other changed job keeps its driver, `Progressing: UpgradeQueued`, until a slot is free."""
BUDGETS = """Steady polls and progress writes on the chart's budgets (docs/operations.md, "How the operator spends its time
at scale"): `reconcile.driverPollsPerSecond={polls:g}` (a Ready job polled every {poll:g} s at {jobs} jobs),
`reconcile.progressWritesPerSecond={writes:g}` (its progress written every {write:g} s when nothing else changed)."""


def budgets(r: dict[str, Any]) -> str:
    polls, writes = r.get("driver_polls_per_second"), r.get("progress_writes_per_second")
    if polls is None or writes is None:  # a run from before the budgets: every poll every 10 s, each written
        return "Before the poll and progress-write budgets: every Ready job polled every 10 s, each poll written to status."
    poll = max(10.0, r["jobs"] / polls)
    return BUDGETS.format(polls=polls, writes=writes, jobs=r["jobs"], poll=poll, write=max(poll, r["jobs"] / writes))


def write_report(path: Path, r: dict[str, Any], args: argparse.Namespace) -> None:
    """The report; a phase the run did not reach (stopped, or a time box) is said so, not left out."""
    c, i, f, rs, u = (r.get(k) for k in ("create", "idle", "failure", "restart", "upgrade"))
    sim = r["jobs"] - r["real"]
    rows = []
    bullets = []
    if c:
        ready = c["all_ready_s"]
        rows.append((f"all {r['jobs']} created and Ready", "< 340 s",
                     f"{ready} s" if ready is not None else f"{c['ready']} Ready, not all", verdict(ready is not None and ready < 340)))
        bullets.append(f"""- **Create**: {r['jobs']} StreamJobs created at once by 8 client threads ({c['create_requests_s']} s of
  requests); all Ready after {ready} s (from the first create to the last `status.ready`, sampled every
  {SAMPLE_SECONDS:g} s); simulated jobs' median {c['simulated_ready_p50_s']} s; the real drivers' {c['real_ready_s']}.""")
    if i:
        by_request = ", ".join(f"{k} {v}/s" for k, v in i["by_request_per_s"].items()) or "none"
        rows += [
            ("operator CPU, idle", "<= 0.2 core", f"{i['cpu_cores']} core", verdict(i["cpu_cores"] <= 0.2)),
            ("operator RSS, idle", "<= 300 MB", f"{i['rss_mb']} MB", verdict(i["rss_mb"] <= 300)),
            ("API requests by the operator, idle", "<= 20/s", f"{i['requests_per_s']}/s", verdict(i["requests_per_s"] <= 20)),
        ]
        bullets.append(f"""- **Idle** ({i['window_s']:g} s window after a {i['warmup_s']:g} s warm-up, every job running and Ready):
  operator CPU {i['cpu_cores']} core (/proc utime+stime), RSS {i['rss_mb']} MB; its API requests (audit log)
  {i['requests_per_s']}/s: {by_request}. Driver `/status` calls answered by the load generator:
  {i['driver_status_calls_per_s']}/s (not API requests).""")
    if rs:
        conv = rs["converged_after_delete_s"]
        rows.append(("converged after an operator restart", "<= 60 s", f"{conv} s" if conv is not None else "not converged",
                     verdict(conv is not None and conv <= 60)))
        bullets.append(f"""- **Operator restart**: its pod deleted; the old one gone after {rs['old_pod_gone_s']} s, the new one
  started at {rs['new_pod_started_s']} s (whole seconds); converged (the new operator has polled every simulated
  driver, and every job is Ready with no operation) {conv} s after the deletion,
  {rs['converged_after_new_start_s']} s after the new pod started.""")
    if f:
        kills = ", ".join(f"{x['reaction_s']} s" for x in f["samples"])
        rows.append(("failure reaction of a real driver, p99", "<= 2 s",
                     f"{f['p99_s']} s (p50 {f['p50_s']} s, {len(f['samples'])} kills)", verdict(f["p99_s"] is not None and f["p99_s"] <= 2)))
        bullets.append(f"""- **Failure reaction**: each round SIGKILLs every real driver's container (every process of it,
  through containerd), one driver after the other; from each kill to the operator's first reaction (the failed
  pod deleted, or its replacement created, whichever a pod watch sees first): {kills}. p50 {f['p50_s']} s,
  p99 {f['p99_s']} s (with {len(f['samples'])} samples the p99 is the maximum), {f['missed']} missed; after the kubelet reported the pod Failed: p50 {f['after_pod_failed_p50_s']} s.""")
    bound = r.get("max_concurrent_upgrades")  # None: a run from before the setting
    if u and bound is not None:
        peak = u["peak_upgrading"]
        ok = u["all_upgraded_s"] is not None and (bound == 0 or peak <= bound)
        rows.append(("rolling upgrade of all jobs", "bounded by a documented concurrency setting",
                     f"`--max-concurrent-upgrades {bound}`: at most {peak} jobs upgrading at once, all upgraded in "
                     f"{u['all_upgraded_s']} s", verdict(ok)))
        bullets.append(f"""- **Rolling upgrade**: every job's image tag changed at once ({u['patch_requests_s']} s of patches,
  `upgradeMode: last-state`), the chart's `reconcile.maxConcurrentUpgrades={bound}`. At most {peak} jobs recorded an
  upgrade or rollback at once (every status version the watch delivered); all upgraded (new driver, Ready) after
  {u['all_upgraded_s']} s. Samples (s, upgrading, done): {u['samples']}.""")
    elif u:
        rows.append(("rolling upgrade of all jobs", "bounded by a documented concurrency setting",
                     f"no such setting in the operator measured; {u['max_in_flight']} jobs upgrading at once at most, "
                     f"all upgraded in {u['all_upgraded_s']} s", "**missed**"))
        bullets.append(f"""- **Rolling upgrade**: every job's image tag changed at once ({u['patch_requests_s']} s of patches,
  `upgradeMode: last-state`). Up to {u['max_in_flight']} jobs with an operation at once; all upgraded (new
  driver, Ready) after {u['all_upgraded_s']} s. Samples (s, in flight, done): {u['samples']}.""")
    else:
        rows.append(("rolling upgrade of all jobs", "bounded by a documented concurrency setting",
                     f"{'`--max-concurrent-upgrades ' + str(bound) + '`' if bound is not None else 'no such setting'}; {NOT_RUN}",
                     "not measured" if bound is not None else "**missed** (no setting)"))
    for goal, phase in (("failure reaction", f), ("operator restart", rs), ("idle", i)):
        if not phase:
            bullets.append(f"- **{goal.capitalize()}**: {NOT_RUN}.")
    table = "\n".join(f"| {a} | {b} | {c_} | {d} |" for a, b, c_, d in rows)
    phases = "\n".join(bullets)
    one, five, fifteen = (round(x, 1) for x in (r.get("load_average") or os.getloadavg()))
    cmd = (f"python benchmarks/operator_scale.py --jobs {r['jobs']} --real {r['real']} --kills {args.kills}"
           f" --lease-seconds {r.get('lease_seconds', 15)} --warmup {args.warmup:g} --window {args.window:g}"
           + (f" --max-concurrent-upgrades {bound}" if bound is not None else ""))
    publish(path, f"""# Operator at scale: {r['jobs']} StreamJobs

One operator (from its Helm chart, as a pod on the test bed's real node, containerd and a kubelet, on the host's
network, under its ServiceAccount, with `leaderElection.leaseSeconds={r.get('lease_seconds', 15)}`), one run,
{r['jobs']} StreamJobs: **{r['real']} with real drivers** (Spark in local mode, each a container of the built runtime
image on the real node asking {r.get('real_driver_cpu', '?')} of its {r.get('node_cpu', '?')} CPUs:
{r.get('real_drivers_fit', '?')} fit beside the operator) and **{sim} simulated by a load generator**
(`benchmarks/loadgen.py`: their driver pods are kwok pods, `{r['kwok']}`, on a simulated node whose pod CIDR is
{POD_CIDR} on loopback; one asyncio process listens on each pod's address at the control port and answers
`GET /status` from a fixture, RUNNING with an advancing batch id, after checking the job's bearer token;
{r.get('loadgen_unauthorized', 'n/a')} requests refused). The load generator is not a driver: what is measured is
the operator's side, the same whatever answers. Design and phases: the script's docstring.

| goal (issue #25, section 3) | target | measured | |
| --- | --- | --- | --- |
{table}

{SETTING_BEFORE if bound is None else SETTING_NOW}
{budgets(r)}

## Phases

{phases}

States at the end: {r.get('states_at_end', NOT_RUN)}.

{machine()}
Load average at the end of this run (shared machine, other work running): {one} / {five} / {fifteen} (1/5/15 min).

{reproduce(cmd)}
Raw: `{json.dumps(r)}`
""")


if __name__ == "__main__":
    sys.exit(main())
