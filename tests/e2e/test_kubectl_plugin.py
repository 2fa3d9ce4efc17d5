"""``kubectl streamjob`` on the test bed: the real kubectl finds the plugin on PATH and runs it
against one real job (operator, Spark driver, S3).

list, status, savepoint --wait (the savepoint is in S3), history, inspect (valid; a
corrupted copy refused naming the file), logs (-f too), suspend --wait / resume --wait,
errors for a missing job and bad usage with their exit codes, the context's namespace
and --kubeconfig honoured, and no S3 secret in any output. Two driver starts in all.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from streamjob_contract.lifecycle import LifecycleState

from testbed import TestBed, locate
from testbed.waiting import wait_for

from streamjob_e2e import Jobs, Operator, rate_job, savepoint_manifest


EXIT_ERROR, EXIT_USAGE, EXIT_SAVEPOINT_INVALID = 1, 2, 4


class Kubectl:
    """Runs the real kubectl with PATH holding this environment's console scripts (the plugin)."""

    def __init__(self, testbed: TestBed, environ: dict[str, str]) -> None:
        self.kubectl = str(locate.bin_dir() / "kubectl")
        self.env = {**os.environ, **environ,
                    "PATH": f"{locate.venv_bin()}{os.pathsep}{locate.bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}",
                    "KUBECONFIG": str(testbed.kubeconfig)}
        self.outputs: list[str] = []

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.kubectl, *args], capture_output=True, text=True, env={**self.env, **(env or {})},
                              timeout=600, check=False)
        self.outputs += [done.stdout, done.stderr]
        return done

    def ok(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = self.run(*args, env=env)
        assert done.returncode == 0, f"kubectl {' '.join(args)} -> {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout


def test_kubectl_streamjob_drives_a_real_job(
    testbed: TestBed, operator: Operator, jobs: Jobs, s3_secret: str, s3: Any, namespace: str,
    tmp_path: Path,
) -> None:
    assert testbed.s3 is not None
    k = Kubectl(testbed, {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
    sj = ("streamjob", "-n", namespace)

    # discovery: kubectl lists the plugin and runs it
    assert "kubectl-streamjob" in k.ok("plugin", "list")
    assert "savepoint" in k.ok("streamjob", "--help")

    prefix = f"e2e/{namespace}/plug"
    jobs.apply(rate_job("plug", testbed, prefix=prefix))
    jobs.wait_ready("plug")
    jobs.wait("plug", "a completed checkpoint", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)

    # list: a table for people, json for scripts; -A; the context's namespace
    table = k.ok(*sj, "list")
    header, row = table.splitlines()[0].split(), next(line.split() for line in table.splitlines() if line.startswith("plug "))
    assert header[:4] == ["NAME", "STATE", "READY", "BATCH"] and "LAST" in header
    assert row[:3] == ["plug", "Running", "True"] and int(row[3]) >= 1
    listed = json.loads(k.ok("streamjob", "list", "-A", "-o", "json"))
    mine = [j for j in listed if j["namespace"] == namespace]
    assert [(j["name"], j["state"], j["ready"]) for j in mine] == [("plug", LifecycleState.running, True)] and mine[0]["batch"] >= 1
    assert mine[0]["watermarkLagSeconds"] is None  # a query without event time has no watermark to lag
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(Path(testbed.kubeconfig).read_text())
    k.ok("config", "set-context", "--current", f"--namespace={namespace}", f"--kubeconfig={kubeconfig}")
    in_context = k.ok("streamjob", "list", "-o", "yaml", f"--kubeconfig={kubeconfig}", env={"KUBECONFIG": "/nonexistent"})
    assert [j["name"] for j in yaml.safe_load(in_context)] == ["plug"]

    # status: facts, conditions and events as a story; yaml for scripts
    story = k.ok(*sj, "status", "plug")
    assert f"{namespace}/plug" in story and "Conditions" in story and "Events" in story
    assert "DriverCreated" in story and "plug-driver-1" in story
    doc = yaml.safe_load(k.ok(*sj, "status", "plug", "-o", "yaml"))
    assert doc["status"]["state"] == LifecycleState.running and {c["type"] for c in doc["status"]["conditions"]} >= {"Ready", "Savepointing"}
    assert "DriverCreated" in [e["reason"] for e in doc["events"]]

    # savepoint --wait: prints the path once the operator recorded it; it is in S3
    path = k.ok(*sj, "savepoint", "plug", "--wait").strip().splitlines()[-1]
    assert path.startswith("s3://streamjob/") and savepoint_manifest(s3, path) is not None
    assert jobs.status("plug")["lastSavepoint"]["path"] == path and jobs.get("plug")["spec"]["savepointNonce"] == 1

    # history: the savepoint with its batch, trigger and (read from its manifest) size
    hist = json.loads(k.ok(*sj, "history", "plug", "-o", "json", "--sizes"))
    assert hist[0]["path"] == path and hist[0]["trigger"] == "manual" and hist[0]["sizeBytes"] > 0
    # the operator recorded the same size in status, from the manifest: history shows it without reading S3
    assert jobs.status("plug")["lastSavepoint"]["sizeBytes"] == hist[0]["sizeBytes"]
    recorded = json.loads(k.ok(*sj, "history", "plug", "-o", "json"))
    assert recorded[0]["sizeBytes"] == hist[0]["sizeBytes"]
    assert path in k.ok(*sj, "history", "plug")

    # inspect: credentials from the job's Secret, or from AWS_* variables
    inspected = json.loads(k.ok(*sj, "inspect", path, "--job", "plug", "-o", "json"))
    assert inspected["valid"] is True and inspected["batchId"] == hist[0]["batch"] and inspected["job"]["name"] == "plug"
    aws = {"AWS_ENDPOINT_URL": testbed.s3.endpoint, "AWS_ACCESS_KEY_ID": testbed.s3.access_key,
           "AWS_SECRET_ACCESS_KEY": testbed.s3.secret_key}
    assert "Valid:" in k.ok("streamjob", "inspect", path, env=aws)

    # a corrupted copy (one state file's bytes flipped, same size) is refused, naming the file
    bucket, key = path.removeprefix("s3://").split("/", 1)
    objects = s3.list_objects_v2(Bucket=bucket, Prefix=key + "/")["Contents"]
    victim = next(o["Key"] for o in objects if "/offsets/" in o["Key"] and o["Size"] > 0)
    for o in objects:
        body = s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        if o["Key"] == victim:
            body = bytes(b ^ 0xFF for b in body)
        s3.put_object(Bucket=bucket, Key=o["Key"].replace(key, key + "-corrupt", 1), Body=body)
    refused = k.run(*sj, "inspect", path + "-corrupt", "--job", "plug")
    assert refused.returncode == EXIT_SAVEPOINT_INVALID, refused
    assert victim.removeprefix(key + "/") in refused.stderr and "checksum mismatch" in refused.stderr

    # logs: the driver's log through the API server; -f streams what the driver logs next
    log = k.ok(*sj, "logs", "plug")
    assert "accepted savepoint request" in log and path in log
    follow_out = tmp_path / "follow.log"
    with follow_out.open("w") as sink:
        follower = subprocess.Popen([k.kubectl, *sj, "logs", "plug", "-f", "--tail", "1"], stdout=sink,
                                    stderr=subprocess.STDOUT, env=k.env)
        try:
            wait_for(lambda: follow_out.read_text().strip(), 60, "the last log line from logs -f")

            # suspend --wait: stopped with a savepoint (the followed log shows the request), no driver
            k.ok(*sj, "suspend", "plug", "--wait")
            suspended = jobs.status("plug")
            assert suspended["state"] == "Suspended" and suspended["lastSavepoint"]["trigger"] == "suspend"
            wait_for(lambda: suspended["lastSavepoint"]["path"] in follow_out.read_text(), 60,
                     "the suspend savepoint request in the followed log")
        finally:
            if follower.poll() is None:
                follower.terminate()
            follower.wait(30)
    no_driver = k.run(*sj, "logs", "plug")
    assert no_driver.returncode == EXIT_ERROR
    assert f'streamjob "plug" in namespace "{namespace}" has no driver pod (state Suspended)' in no_driver.stderr
    k.ok(*sj, "resume", "plug", "--wait")
    resumed = jobs.status("plug")
    assert resumed["state"] == LifecycleState.running and resumed["ready"] and resumed["driverPod"] == "plug-driver-2"
    assert resumed["restoredFrom"] == suspended["lastSavepoint"]["path"]
    assert [h["trigger"] for h in json.loads(k.ok(*sj, "history", "plug", "-o", "json"))][:2] == ["suspend", "manual"]

    # restart --wait: a new driver from the latest checkpoint (not a savepoint), reported once it is ready
    before = jobs.status("plug")["lastCheckpoint"]["batchId"]
    restarted = k.run(*sj, "restart", "plug", "--wait")
    assert restarted.returncode == 0, restarted
    assert "restart requested (restartNonce=1)" in restarted.stderr and "Running on plug-driver-3" in restarted.stderr
    after = jobs.status("plug")
    assert after["state"] == LifecycleState.running and after["ready"] and after["driverPod"] == "plug-driver-3"
    assert after["lastRestartNonce"] == 1 and after["restoredFrom"] == resumed["restoredFrom"]  # no new savepoint
    assert after["lastCheckpoint"]["batchId"] >= before

    # errors name the job and the namespace; exit codes as documented
    for command in (("status", "nope"), ("savepoint", "nope", "--wait"), ("logs", "nope"), ("history", "nope")):
        missing = k.run(*sj, *command)
        assert missing.returncode == EXIT_ERROR, missing
        assert f'streamjob "nope" not found in namespace "{namespace}"' in missing.stderr
    assert k.run(*sj, "list", "-o", "xml").returncode == EXIT_USAGE
    assert k.run(*sj, "savepoint").returncode == EXIT_USAGE

    for shown in (table, story, k.ok(*sj, "history", "plug"), k.ok(*sj, "inspect", path, "--job", "plug")):
        print(shown)  # seen with -s: what people get
    # no command printed the S3 secret
    assert not [out for out in k.outputs if testbed.s3.secret_key in out]
    assert [p.metadata.name for p in jobs.driver_pods("plug")] == ["plug-driver-3"]
