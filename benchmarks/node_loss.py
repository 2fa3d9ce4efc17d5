"""Node-loss benchmark: how long a job has no output when its driver's node is lost, next to a kill and a cold start.

Run: `python benchmarks/node_loss.py [--real] [--rounds 2] [--report docs/benchmarks/node-loss.md]`
(with the editable install and the images scripts/build-images.sh built; as root: starts its own test bed and
operator, takes a few minutes).

Both modes run the driver in a container of the built runtime image on the test bed's real node
(containerd and a kubelet; the operator on the host, operator_bench.bench_operator). By default the
test bed has one node, and a lost node is played by freezing the driver's container (SIGSTOP to
every process of it, through containerd: ``TestBed.signal_pod``): the pod stays Running in the API
and its endpoint answers nothing, as across a dead node. Measured, in one run, with the default
`spec.restartPolicy.driverUnreachableSeconds` (30):

- cold start: driver pod created -> first batch committed;
- kill: the driver's container SIGKILLed -> first batch the killed driver had not committed;
- node loss: the driver frozen -> first batch it had not committed (by batch id: S3 times
  have 1 s granularity).

That test bed has one node, so the node controller's own path (NotReady after its
--node-monitor-grace-period, taint eviction after the driver's toleration) is not played
there: the node controller does not evict from the only node of a zone.

`--real` (the name is kept: the reports name the command that made them; it no longer
chooses the kind of node, which is always real) plays it on two real nodes (containerd and a
kubelet each, testbed.secondnode; report docs/benchmarks/node-loss-real.md): the driver runs on
the second node, which is then lost in two ways, each round on a new job:

- kubelet hangs (SIGSTOP of the node's kubelet, the driver's container running on): the
  node goes NotReady after the controller manager's grace period (50 s, Kubernetes'
  default), the driver is evicted after its toleration (`driverUnreachableSeconds`), the
  operator force-deletes it and starts the replacement on the first node;
- node cut off (the kubelet hung and the driver's container frozen): the operator's own
  timer replaces the driver.

Measured: loss -> node NotReady, -> replacement pod created, -> replacement's first batch, and the
output gap (the longest time without a commit, from the loss to the replacement's third batch).
"""

from __future__ import annotations

import argparse
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

from operator_bench import (
    CORE_REQUEST,
    NS,
    REPO,
    bench_main,
    bench_operator,
    bench_spec,
    commit_times,
    pod_created,
    rounded,
    status,
    wait,
)
from testbed import TestBed


def main() -> int:
    if "--real" in sys.argv:
        return real_main()
    return bench_main(__doc__.splitlines()[0], "node-loss.md", run, write_report)


def real_main() -> int:
    parser = argparse.ArgumentParser(description="node loss on two real nodes")
    parser.add_argument("--real", action="store_true", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "benchmarks" / "node-loss-real.md")
    args = parser.parse_args()
    with bench_operator(nodes=2) as (bed, core, custom, s3):
        results = run_real(bed, core, custom, s3, args.rounds)
    write_real_report(args.report, results)
    print(json.dumps(results, indent=2))
    return 0


def node_ready(core: client.CoreV1Api, name: str) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in core.read_node(name).status.conditions or [])


def start_on_second_node(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, s3: Any,
                         name: str) -> tuple[dict[str, Any], float]:
    """A new job whose driver the scheduler puts on the second node (the first cordoned meanwhile); its status
    once it has committed 2 batches, and its cold start (pod created -> first batch)."""
    assert bed.second_node is not None
    spec = bench_spec(bed, checkpoint={"location": f"s3a://streamjob/bench/{name}/checkpoint", "triggerInterval": "1 second"},
                      restartPolicy={"type": "FixedDelay", "delaySeconds": 0, "maxRestarts": 100})
    spec["job"]["pipeline"]["sink"]["path"] = f"s3a://streamjob/bench/{name}/output"
    core.patch_node(bed.node_name, {"spec": {"unschedulable": True}})
    try:
        custom.create_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs",
                                               {"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                                                "metadata": {"name": name}, "spec": spec})
        pod = f"{name}-driver-1"
        wait(lambda: core.read_namespaced_pod(pod, NS).spec.node_name, 120, f"{pod} scheduled")
    finally:
        core.patch_node(bed.node_name, {"spec": {"unschedulable": False}})
    assert core.read_namespaced_pod(pod, NS).spec.node_name == bed.second_node.node_name
    st = wait(lambda: (x := status(custom, name)).get("checkpointLocation") and x, 60, "deploy")
    cold = first_new_batch(s3, st["checkpointLocation"], -1) - pod_created(core, pod)
    st = wait(lambda: (x := status(custom, name)).get("ready") and (x.get("lastCheckpoint") or {}).get("batchId", -1) >= 2
              and x, 600, "2 batches")
    return st, cold


def lose(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, s3: Any, name: str, cut: bool) -> dict[str, float]:
    """Loses the second node under job ``name``'s driver; seconds from the loss to each step, and the output gap."""
    second = bed.second_node
    assert second is not None
    st = status(custom, name)
    location = st["checkpointLocation"]
    container = core.read_namespaced_pod(st["driverPod"], NS).status.container_statuses[0].container_id
    at = time.time()
    second.stop_kubelet()
    if cut:
        second.ctr("tasks", "pause", container.removeprefix("containerd://"))
    out: dict[str, float] = {}
    try:
        replacement = f"{name}-driver-2"
        created = pod_created(core, replacement) if wait(lambda: status(custom, name).get("driverPod") == replacement,
                                                         600, "a replacement") else 0.0
        out["replacement_created_s"] = created - at
        # the replacement takes the checkpoint's next epoch as it starts, before its JVM: the old driver (if it
        # runs on) is fenced then, at most one commit in flight later; the replacement's first batch comes after
        # its JVM and session start, so commits 3 s past the epoch are the replacement's
        taken = wait(lambda: newest_epoch_time(s3, location, after=at), 600, "the replacement's epoch")
        ours = wait(lambda: (x := sorted(t for _, t in commit_times(s3, location) if t > taken + 3)) and len(x) >= 3 and x,
                    600, "3 batches of the replacement")
        points = [at] + sorted(t for _, t in commit_times(s3, location) if at < t <= ours[2])
        # the longest time without a commit: from the loss (or the old driver's last commit) to the replacement's first
        gap, first = max((b - a, b) for a, b in zip(points, points[1:]))
        out["output_gap_s"], out["first_batch_s"] = gap, first - at
        if not cut:
            wait(lambda: not node_ready(core, second.node_name), 300, "NotReady")
            transition = next(c.last_transition_time for c in core.read_node(second.node_name).status.conditions
                              if c.type == "Ready")
            out["node_not_ready_s"] = transition.timestamp() - at
    finally:
        second.thaw()
        wait(lambda: node_ready(core, second.node_name), 180, "Ready again")
        custom.delete_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs", name)
        wait(lambda: not [p for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith(f"{name}-")] or None,
             300, f"{name}'s drivers gone")  # the next round's driver has the machine to itself
    return out


def newest_epoch_time(s3: Any, location: str, after: float) -> float | None:
    """When the newest driver epoch of ``location`` was taken (job_runtime.checkpoints.epoch), if after ``after``."""
    bucket, _, key = location.split("://", 1)[1].partition("/")
    times = [o["LastModified"].timestamp()
             for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{key}/_streamjob_epochs/").get("Contents", [])]
    return max(times) if times and max(times) > after else None


def run_real(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, s3: Any, rounds: int) -> dict[str, Any]:
    result: dict[str, Any] = {"cold_start_s": [], "hang": [], "cut": []}
    for i in range(rounds):
        for kind in ("hang", "cut"):
            _, cold = start_on_second_node(bed, core, custom, s3, f"{kind}{i}")
            result["cold_start_s"].append(cold)
            result[kind].append(lose(bed, core, custom, s3, f"{kind}{i}", cut=kind == "cut"))
    return stamped(result)


def write_real_report(path: Path, r: dict[str, Any]) -> None:
    cold = statistics.median(r["cold_start_s"])

    def med(kind: str, key: str) -> str:
        values = [x[key] for x in r[kind] if key in x]
        return f"{statistics.median(values):.1f}" if values else "-"

    rows = [
        ("driver's kubelet hangs, the driver runs on (node NotReady, driver evicted)", "hang"),
        ("driver's node cut off (kubelet hung, driver frozen)", "cut"),
    ]
    table = "\n".join(f"| {what} | {med(kind, 'node_not_ready_s')} | {med(kind, 'replacement_created_s')} | "
                      f"{med(kind, 'first_batch_s')} | {med(kind, 'output_gap_s')} |" for what, kind in rows)
    limit = r["driver_unreachable_seconds"]
    text = f"""# Node loss on two real nodes

Produced by `python benchmarks/node_loss.py --real` ({r['measured_at']}, {r['cpu_count']} CPUs shared with other
work): two real nodes on one machine (containerd and a kubelet each; one kube-scheduler, kube-controller-manager with
Kubernetes' default `--node-monitor-grace-period` of 50 s), one driver in Spark local mode on the second node (rate
source at 10 rows/s, 1 s trigger, checkpoint on the test bed's S3 server), `spec.restartPolicy.driverUnreachableSeconds`
{limit} (the default). Each loss on a new job; seconds from the loss, medians of {len(r['hang'])} rounds; raw values below.
Cold start on the same node (pod created -> first batch): {cold:.1f} s.

| loss | node NotReady | replacement pod created | replacement's first batch | output gap |
| --- | ---: | ---: | ---: | ---: |
{table}

Raw: `{json.dumps(rounded(r))}`

Reading:

- **The kubelet hangs, the driver runs on.** Nothing is lost while the node controller decides: the driver
  commits until its replacement takes the checkpoint, then is fenced (exit 14 at its next commit). The node is
  marked after the grace period, its `unreachable` taint evicts the driver after the driver's toleration
  (`driverUnreachableSeconds`, not Kubernetes' 300 s), and the operator deletes the evicted pod with grace 0 at
  once. The output gap is the replacement's start, not the detection.
- **The node is cut off.** The operator's timer fires `driverUnreachableSeconds` after the driver's last answer,
  before the node controller has marked the node: the replacement is created while the lost node still looks
  Ready, and avoids it (a preferred node affinity away from the node the driver was lost on).
- Before 0.1.0 (no `driverUnreachableSeconds`), a lost node cost the default 300 s toleration, the pod's grace
  period and 60 s more: about 7 minutes.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def first_new_batch(s3: Any, location: str, after_batch: int) -> float:
    found = wait(lambda: [t for b, t in commit_times(s3, location) if b > after_batch], 600, f"a new batch in {location}")
    return float(min(found))


def stop_driver(bed: TestBed, custom: client.CustomObjectsApi, s3: Any, sig: signal.Signals) -> tuple[float, str]:
    """Sends ``sig`` to every process of the ready driver's container; returns when, and the driver's name."""
    wait(lambda: status(custom, "b").get("ready"), 600, "ready")
    time.sleep(5)
    st = status(custom, "b")
    bed.signal_pod(NS, st["driverPod"], sig)
    at = time.time()  # ctr has returned: the signal is sent (the pod's read and ctr's start came before it)
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
    return stamped(result)


def stamped(result: dict[str, Any]) -> dict[str, Any]:
    """The run's settings and circumstances, beside its figures."""
    result["driver_unreachable_seconds"] = 30  # the default: the benchmarked specs leave it out
    result["core_request"] = CORE_REQUEST
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
`spec.restartPolicy.driverUnreachableSeconds` {limit}, the default; the driver a container of the built runtime
image on the test bed's one real node, containerd and a kubelet, asking {r.get('core_request', '?')} of its CPUs; the
operator on the host). Times are medians; raw values below.

| measure | seconds | ratio to cold start |
| --- | ---: | ---: |
| cold start (pod created -> first batch committed) | {cold:.1f} | 1.00 |
| driver killed (SIGKILL) -> first batch it had not committed | {kill:.1f} | {kill / cold:.2f} |
| driver's node lost (its container frozen) -> first batch it had not committed | {lost:.1f} | {lost / cold:.2f} |

Raw: `{json.dumps({k: [round(x, 2) for x in v] if isinstance(v, list) else v for k, v in r.items()})}`

Reading: a lost node costs `driverUnreachableSeconds` (counted from the driver's last answer, so up to one
10 s status poll less) plus what a kill costs: the replacement's cold start and the re-run of the interrupted
batch. Before `driverUnreachableSeconds` (0.1.0), nothing happened until the pod was reported gone: on a lost
node the default 300 s toleration of the `unreachable` taint, the pod's grace period, then 60 s more, about
7 minutes. The node controller's own path is not played here: this test bed has one node, and the node
controller does not evict from the only node of a zone. `--real` plays it on two real nodes
([node-loss-real.md](node-loss-real.md)): eviction after the `--node-monitor-grace-period` (50 s by default)
plus the driver's toleration (`driverUnreachableSeconds`), the evicted pod deleted with grace 0 at once.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
