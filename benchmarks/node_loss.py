"""Node-loss benchmark: how long a job has no output when its driver's node is lost, next to a kill and a cold start.

Run: `python benchmarks/node_loss.py [--rounds 2] [--report docs/benchmarks/node-loss.md]`
(with the editable install; starts its own test bed and operator, takes a few minutes).

A lost node is played by freezing the driver's processes (SIGSTOP of the process
group): the pod stays Running in the API and its endpoint answers nothing, as
across a dead node. Measured, in one run, with the default
`spec.restartPolicy.driverUnreachableSeconds` (30):

- cold start: driver pod created -> first batch committed;
- kill: the driver's process SIGKILLed -> first batch the killed driver had not committed;
- node loss: the driver frozen -> first batch it had not committed (by batch id: S3 times
  have 1 s granularity).

The test bed has one node, so the node controller's own path (NotReady after its
--node-monitor-grace-period, taint eviction after the driver's toleration) is not played:
the node controller does not evict from the only node of a zone (it assumes the
control plane is cut off). docs/operations.md gives that path's arithmetic.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client

from operator_bench import NS, bench_main, bench_spec, commit_times, pod_created, status, wait
from testbed import TestBed


def main() -> int:
    return bench_main(__doc__.splitlines()[0], "node-loss.md", run, write_report)


def first_new_batch(s3: Any, location: str, after_batch: int) -> float:
    found = wait(lambda: [t for b, t in commit_times(s3, location) if b > after_batch], 600, f"a new batch in {location}")
    return float(min(found))


def stop_driver(bed: TestBed, custom: client.CustomObjectsApi, s3: Any, sig: signal.Signals) -> tuple[float, str]:
    """Sends ``sig`` to the ready driver's process group; returns when, and the driver's name."""
    wait(lambda: status(custom, "b").get("ready"), 600, "ready")
    time.sleep(5)
    st = status(custom, "b")
    pid = int((bed.pod_log_dir(NS, st["driverPod"]) / "pid").read_text().strip())
    at = time.time()
    os.killpg(pid, sig)
    return at, str(st["driverPod"])


def outage(bed: TestBed, custom: client.CustomObjectsApi, s3: Any, sig: signal.Signals) -> float:
    """Seconds from ``sig`` to the first batch the stopped driver had not committed."""
    location = status(custom, "b")["checkpointLocation"]
    at, victim = stop_driver(bed, custom, s3, sig)
    committed = max((b for b, _ in commit_times(s3, location)), default=-1)
    wait(lambda: status(custom, "b").get("driverPod") not in (None, victim), 600, "a replacement driver")
    return first_new_batch(s3, location, committed) - at


def run(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, s3: Any, rounds: int) -> dict[str, Any]:
    custom.create_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs",
                                           {"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                                            "metadata": {"name": "b"}, "spec": bench_spec(bed)})
    st = wait(lambda: (s := status(custom, "b")).get("checkpointLocation") and s.get("driverPod") and s, 60, "deploy")
    created = pod_created(core, st["driverPod"])
    cold = first_new_batch(s3, st["checkpointLocation"], -1) - created
    result: dict[str, Any] = {"cold_start_s": [cold], "kill_outage_s": [], "node_loss_outage_s": []}
    for _ in range(rounds):
        result["kill_outage_s"].append(outage(bed, custom, s3, signal.SIGKILL))
        result["node_loss_outage_s"].append(outage(bed, custom, s3, signal.SIGSTOP))
    result["driver_unreachable_seconds"] = 30
    result["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result["cpu_count"] = os.cpu_count()
    return result


def write_report(path: Path, r: dict[str, Any]) -> None:
    cold = statistics.median(r["cold_start_s"])
    kill = statistics.median(r["kill_outage_s"])
    lost = statistics.median(r["node_loss_outage_s"])
    limit = r["driver_unreachable_seconds"]
    text = f"""# Node loss

Produced by `python benchmarks/node_loss.py` ({r['measured_at']}, {r['cpu_count']} CPUs shared with other work;
one driver in Spark local mode, rate source at 10 rows/s, 1 s trigger, checkpoint on the test bed's S3 server,
`spec.restartPolicy.driverUnreachableSeconds` {limit}, the default). Times are medians; raw values below.

| measure | seconds | ratio to cold start |
| --- | ---: | ---: |
| cold start (pod created -> first batch committed) | {cold:.1f} | 1.00 |
| driver killed (SIGKILL) -> first batch it had not committed | {kill:.1f} | {kill / cold:.2f} |
| driver's node lost (processes frozen) -> first batch it had not committed | {lost:.1f} | {lost / cold:.2f} |

Raw: `{json.dumps({k: [round(x, 2) for x in v] if isinstance(v, list) else v for k, v in r.items()})}`

Reading: a lost node costs `driverUnreachableSeconds` (counted from the driver's last answer, so up to one
10 s status poll less) plus what a kill costs: the replacement's cold start and the re-run of the interrupted
batch. Before `driverUnreachableSeconds` (0.1.0), nothing happened until the pod was reported gone: on a lost
node the default 300 s toleration of the `unreachable` taint, the pod's grace period, then 60 s more, about
7 minutes. The node controller's own path is not played here: the test bed has one node, and the node
controller does not evict from the only node of a zone. On a cluster it evicts after its
`--node-monitor-grace-period` (50 s by default) plus the driver's toleration (`driverUnreachableSeconds`),
and the operator deletes the evicted pod with grace 0 at once; the operator's own timer usually fires first.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
