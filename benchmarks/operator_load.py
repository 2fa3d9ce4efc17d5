"""Operator load benchmark: the API requests, CPU and memory the operator spends on settled jobs.

Run: `python benchmarks/operator_load.py [--jobs 100] [--window 120] [--report docs/benchmarks/operator-load.md]`
(with the editable install and the images scripts/build-images.sh built; as root: starts its own test bed, with
the real node; takes about 10 minutes).

The operator is installed with its Helm chart, so it runs as a pod (a container of the
built operator image on the test bed's real node) under its own ServiceAccount, and the
API server's audit log records each of its requests. It
watches ``--jobs`` StreamJobs created suspended (no driver, as most jobs of a big
installation are at any moment: suspended, failed or finished). Two settings are
measured one after the other in the same run, each over ``--window`` seconds after
a warm-up: the old behaviour (``reconcile.idlePollSeconds=2``: every job gets a
timer pass every 2 s, a GET of the StreamJob and a LIST of its driver pods) and the
default (``reconcile.idlePollSeconds=60``). Reported per setting: requests per second
by verb and resource (the Lease's included), the operator process's CPU (cores, from
/proc utime+stime over the window) and its resident memory at the end: the container's
process, whose host pid containerd reports (``TestBed.container_pid``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client

import job_runtime
from testbed import TestBed, locate
from testbed.waiting import wait_for

REPO = Path(job_runtime.__file__).resolve().parents[1]
NS = "load"
RELEASE_NS = "streamjob-load"
OPERATOR_USER = f"system:serviceaccount:{RELEASE_NS}:streamjob-operator"
OPERATOR_PODS = "app.kubernetes.io/name=streamjob-operator"  # the chart's label on its operator pods
CLK_TCK = os.sysconf("SC_CLK_TCK")


def helm(bed: TestBed, *args: str) -> None:
    done = subprocess.run([str(locate.bin_dir() / "helm"), f"--kubeconfig={bed.kubeconfig}", *args],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"helm {args[0]} failed: {done.stderr.strip()}\n{bed.component_logs()}")


def job(name: str, s3_endpoint: str) -> dict[str, Any]:
    """A suspended job: it never has a driver, so its image is never run."""
    return {
        "apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "image": "ghcr.io/streamjob/streamjob-runtime:0.1.0", "state": "suspended", "upgradeMode": "last-state",
            "checkpoint": {"location": f"s3a://streamjob/checkpoints/load/{name}"},
            "s3": {"endpoint": s3_endpoint, "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
            "job": {"pipeline": {
                "sources": [{"name": "events", "kind": "rate", "options": {"rowsPerSecond": "1"}}],
                "sink": {"kind": "console"},
            }},
        },
    }


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def operator_requests(audit_log: Path, since: datetime, until: datetime) -> Counter[str]:
    """The operator's requests received in [since, until), by "verb resource" (watches counted when they start)."""
    counts: Counter[str] = Counter()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseStarted" and event.get("verb") == "watch":
            continue
        if event.get("stage") not in ("ResponseStarted", "ResponseComplete") or event["user"]["username"] != OPERATOR_USER:
            continue
        at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if since <= at < until:
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "(non-resource)") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            counts[f"{event['verb']} {resource}"] += 1
    return counts


SETTINGS = ((2, False), (60, False), (2, True), (60, True))  # (idlePollSeconds, readCache); the first is 0.1.0's


def measure(bed: TestBed, core: client.CoreV1Api, idle_seconds: int, read_cache: bool, jobs: int, window: float,
            warmup: float) -> dict[str, Any]:
    helm(bed, "upgrade", "--install", "streamjob", str(REPO / "charts" / "streamjob"), "--namespace", RELEASE_NS,
         "--create-namespace", "--set", f"watchNamespaces={{{NS}}}", "--set", "driverServiceAccount.create=false",
         "--set", f"reconcile.idlePollSeconds={idle_seconds}", "--set", f"reconcile.readCache={str(read_cache).lower()}",
         "--wait", "--timeout", "240s")
    wanted = f"--idle-poll-seconds={idle_seconds}" + ("" if read_cache else " --no-read-cache")

    def the_new_operator() -> int | None:
        """Its container's host pid, once the operator pod with this setting runs alone (the old replica gone)."""
        pods = core.list_namespaced_pod(RELEASE_NS, label_selector=OPERATOR_PODS).items  # a deleted one still counts
        if len(pods) != 1 or pods[0].status.phase != "Running":
            return None
        args = pods[0].spec.containers[0].args or []
        if f"--idle-poll-seconds={idle_seconds}" not in args or ("--no-read-cache" in args) == read_cache:
            return None
        return bed.container_pid(RELEASE_NS, pods[0].metadata.name)

    pid = wait_for(the_new_operator, 240, f"the operator with {wanted} alone")
    time.sleep(warmup)  # the Lease taken, every job passed once, gates set
    since = datetime.now(timezone.utc)
    cpu0 = cpu_seconds(pid)
    time.sleep(window)
    cpu1 = cpu_seconds(pid)
    until = datetime.now(timezone.utc)
    time.sleep(3)  # the audit log's writer catches up
    counts = operator_requests(bed.audit_log, since, until)
    return {
        "idle_poll_seconds": idle_seconds, "read_cache": read_cache, "jobs": jobs, "window_s": window,
        "requests_per_s": round(sum(counts.values()) / window, 2),
        "by_request_per_s": {k: round(v / window, 2) for k, v in counts.most_common()},
        "cpu_cores": round((cpu1 - cpu0) / window, 3),
        "rss_mb": round(rss_mb(pid), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--window", type=float, default=90.0)
    parser.add_argument("--warmup", type=float, default=70.0)
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "benchmarks" / "operator-load.md")
    args = parser.parse_args()

    with TestBed(kafka=False) as bed:
        api = bed.api_client()
        core, custom, ext = client.CoreV1Api(api), client.CustomObjectsApi(api), client.ApiextensionsV1Api(api)
        import yaml

        for path in (REPO / "crds").glob("*.yaml"):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        time.sleep(2)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        for i in range(args.jobs):
            custom.create_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs",
                                                   job(f"idle-{i:04d}", bed.s3_endpoint_for_pods()))
        results = [measure(bed, core, seconds, cache, args.jobs, args.window, args.warmup) for seconds, cache in SETTINGS]
        suspended = custom.list_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs")["items"]
        states = Counter((item.get("status") or {}).get("state") for item in suspended)
    write_report(args.report, results, states, args)
    print(json.dumps(results, indent=2))
    return 0


def write_report(path: Path, results: list[dict[str, Any]], states: Counter[Any], args: argparse.Namespace) -> None:
    before = results[0]["requests_per_s"]
    rows = "\n".join(
        f"| {r['idle_poll_seconds']} s | {'on' if r['read_cache'] else 'off'} | {r['requests_per_s']} | "
        f"{r['requests_per_s'] / before if before else float('nan'):.3f} | {r['cpu_cores']} | {r['rss_mb']} |" for r in results)
    detail = "\n".join(f"- `idlePollSeconds={r['idle_poll_seconds']}`, `readCache={str(r['read_cache']).lower()}`: " + (", ".join(
        f"{k} {v}/s" for k, v in r["by_request_per_s"].items()) or "none") for r in results)
    path.write_text(f"""# Operator load: settled jobs

Produced by `python benchmarks/operator_load.py --jobs {args.jobs} --window {args.window:g}`
({datetime.now(timezone.utc).isoformat(timespec='seconds')}, {os.cpu_count()} CPUs shared with other work). The operator
runs from its Helm chart as a pod under its ServiceAccount, a container of the built operator image on the test bed's
real node (containerd and a kubelet; CPU and RSS from /proc of its process); the API server's audit log counts its
requests.
{args.jobs} StreamJobs, all created `state: suspended` (states at the end: {dict(states)}). The four settings are
measured in this run, one after the other (a `helm upgrade` between them), each over {args.window:g} s after a
{args.warmup:g} s warm-up. The first row is the behaviour of 0.1.0.

| `reconcile.idlePollSeconds` | `reconcile.readCache` | operator requests/s | ratio to 0.1.0 | operator CPU (cores) | operator RSS (MB) |
| --- | --- | ---: | ---: | ---: | ---: |
{rows}

By request:

{detail}

Reading: in 0.1.0 every job cost a GET of the StreamJob and a LIST of its driver pods every 2 s, suspended or
not. The idle gate gives a settled job with no live driver one pass per `idlePollSeconds`; the read cache
serves each pass's reads from the operator's watches (one long-lived request per resource kind, whatever the
number of jobs), so a pass that changes nothing makes no request at all; a running job's pass still calls
its driver's `/status` (not the API server). What remains is the Lease's renewals and the watches. A spec
change, a nonce, a driver pod event or a deletion runs a pass at once in every setting.

Raw: `{json.dumps(results)}`
""")


if __name__ == "__main__":
    sys.exit(main())
