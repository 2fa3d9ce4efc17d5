"""``streamjob-testbed``: bring the local test bed up or down for development.

Called from the console (the README's run command) through the
``streamjob-testbed`` console script.

    streamjob-testbed up [--apply FILE_OR_DIR ...] [--foreground] [--operator] [--kafka]
    streamjob-testbed status
    streamjob-testbed down

``up`` starts the test bed in the background (or in the foreground until
Ctrl-C / SIGTERM), writes the admin kubeconfig to ``.testbed/kubeconfig`` and
the environment to ``.testbed/env`` in the repository, applies the given
manifests with kubectl, and prints ``export KUBECONFIG=...``. Its node is a real
one (testbed.node); with ``--kafka`` it also writes the Secrets ``kafka-credentials`` and ``kafka-ca`` that examples/kafka.yaml
names into the ``default`` namespace (the broker's password never leaves the cluster).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from testbed import locate
from testbed.cluster import TestBed, TestBedError
from testbed.waiting import crds_established, wait_for

log = logging.getLogger("streamjob-testbed")

# S3's port when free (the examples reach S3 through the s3 Service's port 9000)
DEV_S3_PORT = 9000
DEV_KAFKA_PORT = 9092  # the host's plain listener: examples/jobs/kafka_events.py produces to it
DEV_KAFKA_PODS_PORT = 9093  # the kafka Service's port (the PODS listener) that examples/kafka.yaml names
DEV_NAMESPACE = "default"  # where the examples go (they name no namespace)
DEV_KAFKA_TOPICS = ("events", "windows")
OPERATOR_NAMESPACE = "streamjob-system"


def state_dir() -> Path:
    return Path(os.environ.get("STREAMJOB_TESTBED_DIR") or locate.repo_root() / ".testbed")


def _pid_file() -> Path:
    return state_dir() / "testbed.pid"


def _running_pid() -> int | None:
    try:
        pid = int(_pid_file().read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


def _env_lines(bed: TestBed, kubeconfig: Path) -> list[str]:
    """The lines of ``.testbed/env``: the test bed's S3 for boto3 and streamjob-savepoints,
    and on PATH kubectl, helm and this environment's console scripts (the docs use them)."""
    assert bed.s3 is not None
    scripts = sysconfig.get_path("scripts")
    lines = [
        f"export KUBECONFIG={kubeconfig}",
        f"export STREAMJOB_S3_ENDPOINT={bed.s3.endpoint}",
        # spec.s3.endpoint for a job's pods: on the real node the s3 Service's name (testbed.podnet)
        f"export STREAMJOB_S3_ENDPOINT_FOR_PODS={bed.s3_endpoint_for_pods()}",
        # what boto3, the aws CLI and streamjob-savepoints read
        f"export AWS_ENDPOINT_URL={bed.s3.endpoint}",
        f"export AWS_ACCESS_KEY_ID={bed.s3.access_key}",
        f"export AWS_SECRET_ACCESS_KEY={bed.s3.secret_key}",
        f"export AWS_DEFAULT_REGION={bed.s3.region}",
        f"export PATH={locate.bin_dir()}:{scripts}:$PATH",
    ]
    if bed.jars_dir:
        lines.append(f"export STREAMJOB_JARS_DIR={bed.jars_dir}")
    if bed.kafka:
        lines.append(f"export STREAMJOB_KAFKA_BOOTSTRAP={bed.kafka.bootstrap}")
        if bed.kafka.pod_bootstrap:  # what a job's pods dial: SCRAM over TLS (the Secrets publish_kafka_secrets writes)
            lines.append(f"export STREAMJOB_KAFKA_BOOTSTRAP_FOR_PODS={bed.kafka.pod_bootstrap}")
    return lines


def publish_kafka_secrets(bed: TestBed, namespace: str = DEV_NAMESPACE) -> None:
    """The Secrets a job's pods need for the broker's PODS listener, as on a cluster (Strimzi's user and cluster CA
    Secrets): ``kafka-credentials`` (username, password) and ``kafka-ca`` (ca.crt, the test bed's CA)."""
    assert bed.kafka is not None
    (user, password), = bed.kafka.pod_users.items()
    with bed.api_client() as api:
        core = client.CoreV1Api(api)
        for name, data in (("kafka-credentials", {"username": user, "password": password}),
                           ("kafka-ca", {"ca.crt": bed.ca_file.read_text()})):
            body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data=data)
            try:
                core.create_namespaced_secret(namespace, body)
            except ApiException as err:
                if err.status != 409:
                    raise
                core.replace_namespaced_secret(name, namespace, body)


def apply_manifests(bed: TestBed, paths: list[str]) -> None:
    kubectl = str(locate.bin_dir() / "kubectl")
    for path in paths:
        result = subprocess.run(
            [kubectl, f"--kubeconfig={bed.kubeconfig}", "apply", "-f", path],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise TestBedError(f"kubectl apply -f {path} failed:\n{result.stderr.strip()}")
        for line in result.stdout.splitlines():
            log.info("Applied %s", line)
        if "customresourcedefinition" in result.stdout:
            # Custom resources applied next need their CRDs served first.
            wait_for(lambda: crds_established(kubectl, str(bed.kubeconfig)), 60, "the CRDs to be established")


def install_operator(bed: TestBed) -> None:
    """Installs the operator with its Helm chart: the kubelet runs it as a pod,
    under the chart's service account, exactly as on a cluster."""
    helm = str(locate.helm())
    chart = locate.repo_root() / "charts" / "streamjob"
    result = subprocess.run(
        [helm, f"--kubeconfig={bed.kubeconfig}", "upgrade", "--install", "streamjob", str(chart),
         "--namespace", OPERATOR_NAMESPACE, "--create-namespace", "--set", "driverServiceAccount.create=false",
         "--wait", "--timeout", "180s"],
        capture_output=True, text=True, timeout=240,
    )
    if result.returncode != 0:
        raise TestBedError(f"helm install of the operator failed: {result.stderr.strip()}")
    kubectl = str(locate.bin_dir() / "kubectl")
    wait_for(lambda: crds_established(kubectl, str(bed.kubeconfig)), 60, "the CRDs to be established")
    log.info("installed operator namespace=%s chart=%s", OPERATOR_NAMESPACE, chart)


def run_foreground(args: argparse.Namespace) -> int:
    """Runs the test bed in this process until SIGINT/SIGTERM."""
    root = state_dir()
    if _running_pid() not in (None, os.getpid()):
        print(f"streamjob-testbed: already running (pid {_running_pid()}); run 'streamjob-testbed down' first", file=sys.stderr)
        return 1
    run_dir = root / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    ready_file = root / "ready"
    ready_file.unlink(missing_ok=True)
    _pid_file().write_text(str(os.getpid()))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    bed = TestBed(run_dir, s3_port=DEV_S3_PORT, kafka=args.kafka, kafka_port=DEV_KAFKA_PORT, kafka_pods_port=DEV_KAFKA_PODS_PORT,
                  kafka_topics=DEV_KAFKA_TOPICS)
    try:
        bed.start()
        kubeconfig = root / "kubeconfig"
        shutil.copyfile(bed.kubeconfig, kubeconfig)
        env_lines = _env_lines(bed, kubeconfig)
        (root / "env").write_text("\n".join(env_lines) + "\n")
        if bed.kafka and bed.kafka.pod_bootstrap and not bed.kafka.pod_bootstrap.endswith(f":{DEV_KAFKA_PODS_PORT}"):
            print(f"streamjob-testbed: port {DEV_KAFKA_PODS_PORT} was taken; pods reach Kafka at {bed.kafka.pod_bootstrap}: "
                  "edit the bootstrap servers in examples/kafka.yaml to match", file=sys.stderr)
        if bed.kafka and bed.kafka.pod_bootstrap:
            publish_kafka_secrets(bed)
        if args.operator:
            install_operator(bed)
        apply_manifests(bed, args.apply or [])
        ready_file.write_text(json.dumps(bed.info(), indent=2))
        print(f"export KUBECONFIG={kubeconfig}", flush=True)
        print(f"# S3, kubectl and jars: source {root / 'env'}; logs: {bed.log_dir}", flush=True)
        while not stop.wait(1):
            pass
        bed.stop(keep=False)
        return 0
    except TestBedError as exc:
        print(f"streamjob-testbed: {exc}", file=sys.stderr)
        bed.stop(keep=True)
        return 1
    except BaseException:
        bed.stop(keep=True)
        raise
    finally:
        for stale in (ready_file, _pid_file(), root / "env", root / "kubeconfig"):
            stale.unlink(missing_ok=True)


def run_background(args: argparse.Namespace, timeout: float = 300.0) -> int:
    """Starts ``up --foreground`` detached, waits until it is ready, prints the exports."""
    root = state_dir()
    root.mkdir(parents=True, exist_ok=True)
    if _running_pid():
        print(f"streamjob-testbed: already running (pid {_running_pid()}); run 'streamjob-testbed down' first", file=sys.stderr)
        return 1
    (root / "ready").unlink(missing_ok=True)
    shim = root / "pythonpath"
    shim.mkdir(exist_ok=True)
    if not (shim / "testbed").exists():
        (shim / "testbed").symlink_to(Path(__file__).resolve().parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    argv = [sys.executable, "-m", "testbed.cli", "up", "--foreground"]
    if args.operator:
        argv.append("--operator")
    if args.kafka:
        argv.append("--kafka")
    for path in args.apply or []:
        argv += ["--apply", str(Path(path).resolve())]
    log_path = root / "up.log"
    with open(log_path, "wb") as out:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=root, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (root / "ready").exists():
            print(f"export KUBECONFIG={root / 'kubeconfig'}")
            print(f"# S3, kubectl and jars: source {root / 'env'}; stop with: streamjob-testbed down", file=sys.stderr)
            return 0
        if child.poll() is not None:
            print(f"streamjob-testbed: the test bed failed to start; {log_path}:\n{log_path.read_text(errors='replace')[-4000:]}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    child.terminate()
    print(f"streamjob-testbed: not ready within {timeout:.0f}s; see {log_path}", file=sys.stderr)
    return 1


def down(timeout: float = 60.0) -> int:
    pid = _running_pid()
    if pid is None:
        print("streamjob-testbed: not running", file=sys.stderr)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print("streamjob-testbed: stopped", file=sys.stderr)
            return 0
        time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    print(f"streamjob-testbed: killed pid {pid} after {timeout:.0f}s", file=sys.stderr)
    return 1


def status() -> int:
    ready = state_dir() / "ready"
    if _running_pid() and ready.exists():
        print(ready.read_text())
        return 0
    print("streamjob-testbed: not running", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="streamjob-testbed", description="Local test bed: real kube-apiserver, S3, a real node.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the test bed (in the background unless --foreground)")
    up.add_argument("--apply", action="append", metavar="FILE_OR_DIR", help="kubectl apply -f this once up (repeatable, in order)")
    up.add_argument("--foreground", action="store_true", help="stay in the foreground until Ctrl-C / SIGTERM")
    up.add_argument("--operator", action="store_true",
                    help="install the operator with its Helm chart (CRDs included) before applying manifests")
    up.add_argument("--kafka", action="store_true",
                    help=f"also start a Kafka broker (KRaft) on 127.0.0.1:{DEV_KAFKA_PORT} with the topics {', '.join(DEV_KAFKA_TOPICS)}, "
                         f"reached by pods through the kafka Service on port {DEV_KAFKA_PODS_PORT}")
    up.add_argument("manifests", nargs="*", help="more manifests to apply, after --apply ones (lets a shell glob follow --apply)")
    sub.add_parser("down", help="stop a test bed started with up")
    sub.add_parser("status", help="print the running test bed's endpoints")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    if args.command == "up":
        args.apply = (args.apply or []) + list(args.manifests)
        return run_foreground(args) if args.foreground else run_background(args)
    if args.command == "down":
        return down()
    return status()


if __name__ == "__main__":
    sys.exit(main())
