"""Operator benchmark: upgrade downtime and failure reaction time, each next to the cold start of the same driver.

Run: `python benchmarks/operator_bench.py [--rounds 2] [--report docs/benchmarks/operator.md]`
(with the editable install and the images scripts/build-images.sh built; as root: starts its own test bed, with
the real node, and the operator from this checkout on the host; takes minutes).

The driver runs in a container of the built runtime image on the test bed's real node (containerd and a
kubelet, this machine's 2 CPUs; the driver asks ``CORE_REQUEST``, 250m, as the e2e tests' jobs do, so that a
warm standby fits beside it); the image names an upgrade moves between are tags of that image in the node's
store (``bench_image``), as a registry would hold a release's. ``node_loss.py`` runs on its test bed and
operator (``bench_operator``, ``bench_spec``); ``operator_scale.py`` takes its image names and CPU request.

- cold start: driver pod created -> first batch committed (first `commits/N` object in S3);
- upgrade downtime (savepoint mode): last batch committed by the old driver -> first batch
  committed by the new one past it (by batch id: the restore copies the savepoint's commits;
  commit objects' S3 timestamps, both checkpoint locations); measured
  for a cold upgrade and, in the same round, for one through a warm standby (spec.standby);
- failure reaction: every process of the driver's container killed (SIGKILL, through containerd:
  ``TestBed.signal_pod``) -> replacement pod created (seen by a watch), and -> first batch of the replacement.
- a bad-image upgrade (last): an image that cannot be pulled, through a warm standby -> the change
  blocked (StandbyFailed), and the longest time between two commits of the running driver meanwhile.
Ratios are against the cold start measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubernetes import client, watch

import job_runtime
from driver_phases import breakdown, handover, handover_table, table
from pod_logs import FollowedLog
from testbed import TestBed

# The benchmarks' runtime image names: tags of the image scripts/build-images.sh built, made in the node's store as a
# registry holds a release's tags. A repository of their own, never the built name itself: tagging a name onto itself
# deletes it first (ctr images tag --force).
BENCH_REPOSITORY = "localhost/streamjob-bench/streamjob-runtime"
IMAGE = f"{BENCH_REPOSITORY}:0.1.0"  # what the jobs start on (tagged by bench_operator); upgrades go to bench_image's
# the CPU a driver asks of the scheduler: the real node has this machine's 2 CPUs (a request is a scheduling weight,
# Spark still runs its tasks on `cores`), as tests/e2e's rate_job
CORE_REQUEST = "250m"
REPO = Path(job_runtime.__file__).resolve().parents[1]
NS = "bench"


def bench_image(bed: TestBed, tag: str) -> str:
    """``BENCH_REPOSITORY:tag``, made a name of the built runtime image in every node's store of ``bed``."""
    name = f"{BENCH_REPOSITORY}:{tag}"
    bed.tag_runtime_image(name)
    return name


def commit_times(s3: Any, location: str) -> list[tuple[int, float]]:
    bucket, _, key = location.split("://", 1)[1].partition("/")
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{key}/commits/"):
        for o in page.get("Contents", []):
            name = o["Key"].rsplit("/", 1)[-1]
            if name.isdigit():
                out.append((int(name), o["LastModified"].timestamp()))
    return sorted(out)


def wait(probe: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
        except client.ApiException as err:  # not there yet
            if err.status != 404:
                raise
            value = None
        if value:
            return value
        time.sleep(0.25)
    raise TimeoutError(what)


def bench_main(description: str, report: str, measure: Callable[..., dict[str, Any]],
               write: Callable[[Path, dict[str, Any]], None]) -> int:
    """A benchmark of this family: ``--rounds`` rounds of ``measure(bed, core, custom, s3, rounds)`` against one
    operator on one test bed, the results written by ``write`` to docs/benchmarks/``report``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "benchmarks" / report)
    args = parser.parse_args()
    with bench_operator() as (bed, core, custom, s3):
        results = measure(bed, core, custom, s3, args.rounds)
    write(args.report, results)
    print(json.dumps(results, indent=2))
    return 0


def main() -> int:
    return bench_main(__doc__.splitlines()[0], "operator.md", run, write_report)


@contextmanager
def bench_operator(nodes: int = 1) -> Iterator[tuple[TestBed, client.CoreV1Api, client.CustomObjectsApi, Any]]:
    """A test bed with ``nodes`` real nodes, IMAGE in their stores, the CRDs, namespace NS with the S3 Secret "s3",
    and the operator running from this checkout on the host (stopped before the bed: it dials pod IPs and the
    bridge's address, testbed.podnet)."""
    with TestBed(nodes=nodes) as bed:
        assert bed.s3 is not None
        bed.tag_runtime_image(IMAGE)
        api = bed.api_client()
        core, custom, ext = client.CoreV1Api(api), client.CustomObjectsApi(api), client.ApiextensionsV1Api(api)
        s3 = bed.s3_client()
        import yaml

        for path in (REPO / "crds").glob("*.yaml"):
            ext.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        time.sleep(2)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        wait(lambda: core.read_namespaced_service_account("default", NS), 30, "default SA")
        core.create_namespaced_secret(NS, client.V1Secret(metadata=client.V1ObjectMeta(name="s3"), string_data={
            "AWS_ACCESS_KEY_ID": bed.s3.access_key, "AWS_SECRET_ACCESS_KEY": bed.s3.secret_key}))
        env = {**os.environ, "KUBECONFIG": str(bed.kubeconfig)}
        env.pop("PYTHONPATH", None)
        log = open(bed.run_dir / "operator.log", "ab")
        operator = subprocess.Popen([str(Path(sys.executable).with_name("streamjob-operator")),
                                     "--lease-namespace", "default"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            yield bed, core, custom, s3
        finally:
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(30)


def status(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return dict(custom.get_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs", name).get("status") or {})


def pod_created(core: client.CoreV1Api, pod: str) -> float:
    # status names the pod before it is created (the write-ahead log): wait for it
    found = wait(lambda: core.read_namespaced_pod(pod, NS), 60, f"pod {pod}")
    return float(found.metadata.creation_timestamp.timestamp())


def bench_spec(bed: TestBed, **over: Any) -> dict[str, Any]:
    """The benchmarked job: a rate source at 10 rows/s copied to json files, 1 s trigger, Spark local mode."""
    spec: dict[str, Any] = {
        "image": IMAGE, "statePartitions": 2,
        "checkpoint": {"location": "s3a://streamjob/bench/checkpoint", "triggerInterval": "1 second"},
        "savepoint": {"location": "s3://streamjob/bench-savepoints"},
        # the operator (on the host) reads checkpoints and savepoints too: an endpoint the host and pods both reach
        "s3": {"endpoint": bed.s3_endpoint_for_pods_and_host(), "pathStyleAccess": True, "credentialsSecret": {"name": "s3"}},
        "driver": {"memory": "512m", "coreRequest": CORE_REQUEST}, "executor": {"instances": 0},
        "restartPolicy": {"type": "FixedDelay", "delaySeconds": 0, "maxRestarts": 100},
        "job": {"pipeline": {"sources": [{"name": "t", "kind": "rate", "options": {"rowsPerSecond": "10"}}],
                             "transforms": [{"name": "o", "sql": "SELECT value FROM t"}],
                             "sink": {"kind": "files", "format": "json", "path": "s3a://streamjob/bench/output"}}},
    }
    spec.update(over)
    return spec


def run(bed: TestBed, core: client.CoreV1Api, custom: client.CustomObjectsApi, s3: Any, rounds: int) -> dict[str, Any]:
    assert bed.s3 is not None
    spec = bench_spec(bed)
    custom.create_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs",
                                           {"apiVersion": "streamjob.io/v1alpha1", "kind": "StreamJob",
                                            "metadata": {"name": "b"}, "spec": spec})

    def first_commit_after(location: str, after: float) -> float:
        found = wait(lambda: [t for _, t in commit_times(s3, location) if t >= after - 1], 600, f"a commit in {location}")
        return float(min(found))

    st = wait(lambda: (s := status(custom, "b")).get("checkpointLocation") and s.get("driverPod") and s, 60, "deploy")
    created = pod_created(core, st["driverPod"])
    first = first_commit_after(st["checkpointLocation"], created)
    result: dict[str, Any] = {"cold_start_s": [first - created], "upgrade_downtime_s": [], "standby_upgrade_downtime_s": [],
                              "failure_reaction_s": [], "failure_recovery_s": [],
                              "phases_cold": [breakdown(created, bed.pod_log(NS, st["driverPod"]), first, first)],
                              "phases_recovery": [], "phases_handover": []}

    def upgrade(change: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], float, float]:
        """Applies ``change``; (old status, new status, downtime: last commit of the old -> first of the new,
        the time of that first commit of the new). A standby upgrade's phases go to result["phases_handover"]."""
        old = status(custom, "b")
        standby = bool(change.get("standby", {}).get("enabled"))
        # the upgrade deletes the old driver's pod, and its log with it: follow it from before the change
        old_log = FollowedLog(core, NS, old["driverPod"]) if standby else None
        custom.patch_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs", "b", {"spec": change})
        # the new driver's storage hygiene prunes the old run's folder once it has committed: keep its last listing
        old_commits: list[tuple[int, float]] = []

        def upgraded() -> dict[str, Any] | None:
            old_commits[:] = commit_times(s3, old["checkpointLocation"]) or old_commits
            s = status(custom, "b")
            return s if s.get("driverPod") != old["driverPod"] and s.get("ready") and s.get("operation") is None else None

        new = wait(upgraded, 600, "upgrade")
        last_batch, last_old = max(old_commits)
        # by batch id: the restore copies the savepoint's commits into the new location, they are not new batches
        first_new = wait(lambda: [t for b, t in commit_times(s3, new["checkpointLocation"]) if b > last_batch], 600,
                         "the new driver's first batch")
        if old_log is not None:
            result["phases_handover"].append(handover(last_old, old_log.text(), bed.pod_log(NS, new["driverPod"]),
                                                      min(first_new)))
        return old, new, min(first_new) - last_old, min(first_new)

    for i in range(rounds):
        wait(lambda: status(custom, "b").get("ready"), 600, "ready")
        time.sleep(5)
        _, new, downtime, first_new = upgrade({"image": bench_image(bed, f"0.1.{i + 1}"), "standby": {"enabled": False}})
        result["upgrade_downtime_s"].append(downtime)
        # a restored start, for reference in the same run: to its first new batch (by batch id, as the downtime:
        # the commits the restore copied into the new location are older batches, copied before the query starts)
        result["cold_start_s"].append(first_new - pod_created(core, new["driverPod"]))
        # the same change through a warm standby: its pod is created before the old driver stops
        time.sleep(5)
        _, _, downtime, _ = upgrade({"image": bench_image(bed, f"0.2.{i + 1}"), "standby": {"enabled": True}})
        result["standby_upgrade_downtime_s"].append(downtime)

        time.sleep(5)
        victim_status = status(custom, "b")
        victim = victim_status["driverPod"]
        w = watch.Watch()
        bed.signal_pod(NS, victim, signal.SIGKILL)
        killed = time.time()  # ctr has returned: the kill is sent (the pod's read and ctr's start came before it)
        # S3 times have 1 s granularity: tell the replacement's commits by batch id, not by time
        committed_before = max((b for b, _ in commit_times(s3, victim_status["checkpointLocation"])), default=-1)
        replaced = None
        for ev in w.stream(core.list_namespaced_pod, NS, label_selector="streamjob.io/role=driver", timeout_seconds=120):
            if ev["type"] == "ADDED" and ev["object"].metadata.name != victim and ev["object"].metadata.creation_timestamp.timestamp() >= killed - 1:
                replaced = time.time()
                w.stop()
        assert replaced is not None, "no replacement driver"
        result["failure_reaction_s"].append(replaced - killed)
        after = wait(lambda: (s := status(custom, "b")).get("driverPod") != victim and s.get("checkpointLocation") and s, 60, "replaced")
        first_new_batch = wait(lambda: [t for b, t in commit_times(s3, after["checkpointLocation"]) if b > committed_before],
                               600, "the replacement's first commit")
        result["failure_recovery_s"].append(min(first_new_batch) - killed)
        replacement = pod_created(core, after["driverPod"])
        # the first batch the replacement commits is the one the kill interrupted: its first new batch (the
        # new run folder's earlier commits are copies the checkpoint's recovery made before the query started)
        result["phases_recovery"].append(breakdown(replacement, bed.pod_log(NS, after["driverPod"]),
                                                   min(first_new_batch), min(first_new_batch)))
    result["bad_image"] = bad_image_upgrade(custom, s3)
    result["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result["cpu_count"] = os.cpu_count()
    result["core_request"] = CORE_REQUEST
    result["load_average"] = [round(x, 1) for x in os.getloadavg()]
    return result


MISSING_IMAGE = "localhost/streamjob-missing/no-such-image:9.9.9"  # no such image: the standby's pull fails


def bad_image_upgrade(custom: client.CustomObjectsApi, s3: Any) -> dict[str, float]:
    """An upgrade to an image that cannot be pulled, through a warm standby (last: the change stays blocked):
    seconds until the change is blocked (StandbyFailed), and the longest time between two commits of the running
    driver from 10 s before the change until 10 s after the block, next to the longest before the change."""
    wait(lambda: status(custom, "b").get("ready"), 600, "ready")
    time.sleep(10)
    before = status(custom, "b")
    at = time.time()
    custom.patch_namespaced_custom_object("streamjob.io", "v1alpha1", NS, "streamjobs", "b",
                                          {"spec": {"image": MISSING_IMAGE, "standby": {"enabled": True}}})
    blocked = wait(lambda: ((s := status(custom, "b")).get("blockedChange") or {}).get("reason") == "StandbyFailed" and s,
                   600, "the change blocked by StandbyFailed")
    blocked_at = time.time()
    time.sleep(10)
    assert status(custom, "b")["driverPod"] == before["driverPod"] == blocked["driverPod"], "the driver was replaced"
    commits = [t for _, t in commit_times(s3, before["checkpointLocation"])]

    def longest(start: float, end: float) -> float:
        times = sorted(t for t in commits if start <= t <= end)
        return max((b - a for a, b in zip(times, times[1:])), default=float("inf"))

    return {"blocked_s": blocked_at - at, "longest_gap_s": longest(at - 10, blocked_at + 10),
            "longest_gap_before_s": longest(at - 10, at)}


def met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def rounded(value: Any) -> Any:
    """``value`` with every float rounded to hundredths, inside lists and dicts too."""
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def write_report(path: Path, r: dict[str, Any]) -> None:
    cold = statistics.median(r["cold_start_s"])
    up = statistics.median(r["upgrade_downtime_s"])
    warm = statistics.median(r["standby_upgrade_downtime_s"])
    react = statistics.median(r["failure_reaction_s"])
    recover = statistics.median(r["failure_recovery_s"])
    bad = r["bad_image"]
    text = f"""# Operator benchmark

Produced by `python benchmarks/operator_bench.py` ({r['measured_at']}, {r['cpu_count']} CPUs shared with other
work, load average at the end {" / ".join(map(str, r.get("load_average", ["?"])))} (1, 5, 15 min); one driver in Spark local mode, rate source at 10 rows/s, 1 s trigger, checkpoint and savepoints on the
test bed's S3 server; the driver a container of the built runtime image on the test bed's real node, containerd and
a kubelet, asking {r.get("core_request", "?")} of its CPUs; the operator on the host). Times are medians; raw values below.

| measure | seconds | ratio to cold start |
| --- | ---: | ---: |
| cold start of the driver (pod created -> first batch committed) | {cold:.1f} | 1.00 |
| upgrade downtime, savepoint mode (last batch of old driver -> first batch of new) | {up:.1f} | {up / cold:.2f} |
| the same through a warm standby (`spec.standby.enabled`) | {warm:.1f} | {warm / cold:.2f} |
| failure reaction (driver killed -> replacement pod created) | {react:.2f} | {react / cold:.3f} |
| failure recovery (driver killed -> first batch of the replacement) | {recover:.1f} | {recover / cold:.2f} |
| upgrade to an image that cannot be pulled, through a warm standby: time to the block (StandbyFailed) | {bad['blocked_s']:.1f} | {bad['blocked_s'] / cold:.2f} |
| ... longest time between two commits of the running driver meanwhile (10 s before the change to 10 s after the block) | {bad['longest_gap_s']:.1f} | {bad['longest_gap_s'] / cold:.2f} |
| ... the same in the 10 s before the change | {bad['longest_gap_before_s']:.1f} | {bad['longest_gap_before_s'] / cold:.2f} |

Against the goals set for this operator (ratios from this run):

| goal | this run | |
| --- | ---: | --- |
| warm-standby upgrade downtime <= 0.35x the cold start | {warm / cold:.2f}x | {met(warm / cold <= 0.35)} |
| warm-standby upgrade downtime <= 0.5x the cold upgrade's | {warm / up:.2f}x | {met(warm / up <= 0.5)} |
| failure recovery <= 1.1x the cold start | {recover / cold:.2f}x | {met(recover / cold <= 1.1)} |
| a bad-image upgrade: 0 s of downtime (no longer gap between commits than before the change, within S3's 1 s) | {bad['longest_gap_s'] - bad['longest_gap_before_s']:.1f} s | {met(bad['longest_gap_s'] - bad['longest_gap_before_s'] <= 1.0)} |

Where a start goes, from the driver's own log lines and its checkpoint's commits
([driver_phases.py](../../benchmarks/driver_phases.py)); a recovery starts at its replacement pod's creation,
{react:.2f} s after the kill:

{table({"cold start (first deploy)": r["phases_cold"], "failure recovery": r["phases_recovery"]})}
Where a warm-standby upgrade's downtime goes, from the old driver's and the standby's log lines (the old
driver's log followed through the API server from before the change until its container ended: the kubelet
drops a pod's log with the pod):

{handover_table(r.get("phases_handover", []))}
Raw: `{json.dumps(rounded(r))}`

Reading: the upgrade downtime is the stop-with-savepoint, the copy of the checkpoint to the savepoint, the
old pod's deletion and a cold start of the new driver that restores the savepoint; the cold start dominates.
Through a warm standby the new driver's pod, JVM and session start while the old one still commits, so its
downtime is the stop-with-savepoint, the old pod's deletion, the release, the restore and the first batch.
The failure reaction is the pod watch plus one reconcile pass (restartPolicy delaySeconds 0).
The cold-start median pools the first (fresh) start with the restored starts after each upgrade (raw
`cold_start_s`, first value fresh), each to its first new batch by batch id: the commits a restore copies into
the new location are older batches (before 2026-11-26 afternoon they were taken for the first batch, which
made restored starts look 5 to 8 s shorter and every ratio larger). Failure recovery is counted from the kill to the first commit of a batch
the killed driver had not committed (by batch id: S3 times have 1 s granularity); it includes the replacement's
cold start and the re-run of the batch the kill interrupted; the phase table shows where the difference to a
cold start goes. The rows that are ours are the first two (the runtime's start and its checkpoint checks:
owner, epoch, listing and repair of the checkpoint, state partitions); the JVM and the Spark session are
Spark's, and on a loaded 2-core machine they dominate every start. One run on a 2-CPU machine, so single numbers swing by several seconds.
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
