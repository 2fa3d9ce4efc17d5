"""docs/cluster.md ("Run it on your cluster"), tried end to end on the real node with only what the page says.

How the page is read (``page_script``): every fenced ```bash block, in page order, joined
into one bash script run with ``set -euo pipefail`` (variables carry from block to block,
as in the reader's terminal), in an empty folder, with ``KUBECONFIG`` at the test bed and
its helm and kubectl first on ``PATH``. ```yaml blocks are fragments the reader pastes;
the page's commands are the ```bash ones. Nothing on the page is marked for the test:
what cannot run here is listed below, each entry with its reason, and each must match the
page exactly once (an entry the page no longer has fails the test, so the lists follow
the page):

- ``SKIPPED_BLOCKS``: whole blocks (by their first line) that need what this machine
  has not (an EKS OIDC provider, an old spark-submit job's checkpoint);
- ``SUBSTITUTIONS``: page text replaced by its test-bed equivalent (no registry: the
  built images are tagged into the node's containerd, where a pull would have put them;
  no AWS: the bucket on the test bed's S3, its one region, its key; the brokers: the test
  bed's Kafka broker through the ``kafka`` Service, SASL_SSL with SCRAM-SHA-512 as the page
  says, its certificate from the test bed's private CA, which the job is given as the page's
  private-CA note says).

Everything else runs as written: the chart packaged by scripts/package-chart.sh and
installed with ``helm install --wait`` (so the operator runs as a container of the
operator image on the real node), the namespace, the Secret, the job image built
``FROM`` the runtime image, ``kubectl apply`` of the page's manifest, ``kubectl wait``
for Ready. Then the API must show the job Ready with a committed batch, its driver a
containerd container of the page's image, the operator a container of the chart's.

The page's Kafka part ("With Kafka") runs as a second script in the same terminal state
(the first script's variables and folder carry over), after the test has checked the
first job and deleted it: the node has 2 CPUs and each driver requests one. The topics
exist before it runs (the page says they must) with a minute of events in them; the
test then reads the page's job's output from the topic, read_committed, and checks the
counts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testbed import TestBed, imagestore, locate
from testbed.kafka import KafkaBroker
from testbed.node import NAMESPACE as CONTAINERD_NAMESPACE
from testbed.waiting import wait_for

from streamjob_e2e import REPO

PAGE = REPO / "docs" / "cluster.md"
KAFKA_HEADING = "### With Kafka"  # where the page's second script starts
PART_BREAK = "# --- the page's Kafka part starts here (tests/e2e/test_cluster_page.py) ---"
REAL_BED_KAFKA = True  # tests/conftest.py: the broker, reachable from pods through the kafka Service
PAGE_REGISTRY = "registry.example.com/team"  # the page's placeholder, kept: the images get tagged under it
NAMESPACE = "analytics"
RELEASE_NAMESPACE = "streamjob-system"
# a bound, not the expected time: about 6 minutes on an idle 2-core machine (the image export is half of it),
# over 10 under heavy load; the page's own kubectl wait allows 10 minutes
SCRIPT_TIMEOUT = 1200

# first line of a ```bash block -> why it does not run here
SKIPPED_BLOCKS: dict[str, str] = {
    "helm upgrade streamjob oci://$REGISTRY/charts/streamjob --version $VERSION -n streamjob-system --reuse-values \\":
        "IRSA needs an EKS cluster's OIDC provider and IAM roles; the test bed has neither",
    "# 1. stop the old job (query.stop() or kill the driver): its checkpoint ends at a committed batch":
        "needs a checkpoint of a job started with spark-submit; tests/savepoints runs streamjob-savepoints",
}


@dataclass(frozen=True)
class Substitution:
    page: str  # text of the runnable blocks, matched exactly ``count`` times
    bed: str  # what runs instead
    reason: str
    count: int = 1


SUBSTITUTIONS: tuple[Substitution, ...] = (
    Substitution("git clone <repository-url> streamjob && cd streamjob",
                 'cp -a "$SJ_CHECKOUT" streamjob && cd streamjob',
                 "the checkout under test (its tracked and new files), not a remote"),
    Substitution("docker build -t $REGISTRY/streamjob-runtime:$VERSION .",
                 "sj_buildah tag ghcr.io/streamjob/streamjob-runtime:$VERSION $REGISTRY/streamjob-runtime:$VERSION",
                 "scripts/build-images.sh built this Dockerfile already (cached by content): named as the page names it"),
    Substitution("docker build -f images/operator/Dockerfile -t $REGISTRY/streamjob-operator:$VERSION .",
                 "sj_buildah tag ghcr.io/streamjob/streamjob-operator:$VERSION $REGISTRY/streamjob-operator:$VERSION",
                 "as above, images/operator/Dockerfile"),
    Substitution("docker push $REGISTRY/streamjob-runtime:$VERSION",
                 "sj_ctr images tag --force ghcr.io/streamjob/streamjob-runtime:$VERSION $REGISTRY/streamjob-runtime:$VERSION",
                 "no registry: the node imported the built image at start (testbed.node); a pull would leave this tag"),
    Substitution("docker push $REGISTRY/streamjob-operator:$VERSION",
                 "sj_ctr images tag --force ghcr.io/streamjob/streamjob-operator:$VERSION $REGISTRY/streamjob-operator:$VERSION",
                 "as above"),
    Substitution("helm registry login registry.example.com\nhelm push dist/charts/streamjob-$VERSION.tgz oci://$REGISTRY/charts",
                 ": no OCI registry here",
                 "no registry to push the chart to"),
    Substitution("helm install streamjob oci://$REGISTRY/charts/streamjob --version $VERSION \\",
                 "helm install streamjob dist/charts/streamjob-$VERSION.tgz \\",
                 "the page's own alternative without a registry: the packaged file"),
    Substitution("REGION=eu-west-1",
                 "REGION=$SJ_S3_REGION",
                 "the test bed's S3 (versitygw) serves one region and refuses requests signed for another"),
    Substitution("aws s3api create-bucket --bucket $BUCKET --region $REGION \\\n"
                 "  --create-bucket-configuration LocationConstraint=$REGION",
                 'sj_create_bucket "$BUCKET"',
                 "no AWS: the bucket is made on the test bed's S3"),
    Substitution("aws iam create-policy --policy-name streamjob-driver --policy-document file://driver-policy.json\n"
                 "aws iam create-policy --policy-name streamjob-operator --policy-document file://operator-policy.json",
                 "python3 -m json.tool driver-policy.json >/dev/null && python3 -m json.tool operator-policy.json >/dev/null",
                 "no IAM on the test bed (its S3 has one account with every right): the policies are checked to be JSON"),
    Substitution("aws iam create-user --user-name streamjob\n"
                 "aws iam attach-user-policy --user-name streamjob --policy-arn arn:aws:iam::111122223333:policy/streamjob-driver\n"
                 "aws iam attach-user-policy --user-name streamjob --policy-arn arn:aws:iam::111122223333:policy/streamjob-operator\n"
                 "aws iam create-access-key --user-name streamjob      # prints AccessKeyId and SecretAccessKey",
                 ": no IAM user here",
                 "no IAM on the test bed"),
    Substitution("<AccessKeyId>", '"$SJ_S3_ACCESS_KEY"', "the test bed's S3 key"),
    Substitution("<SecretAccessKey>", '"$SJ_S3_SECRET_KEY"', "the test bed's S3 key"),
    Substitution("docker build -t $REGISTRY/clicks:1.0.0 clicks && docker push $REGISTRY/clicks:1.0.0",
                 "sj_buildah bud --isolation chroot -t $REGISTRY/clicks:1.0.0 clicks && sj_push_to_node $REGISTRY/clicks:1.0.0",
                 "no docker daemon: buildah builds the same Dockerfile; no registry: the image is imported into the node's containerd"),
    Substitution("  s3: {region: $REGION, credentialsSecret: {name: s3-credentials}}",
                 "  s3: {region: $REGION, credentialsSecret: {name: s3-credentials}, endpoint: $SJ_S3_ENDPOINT, pathStyleAccess: true}",
                 "the bucket is on the test bed's S3, not AWS: its endpoint for pods (the s3 Service, testbed.podnet)",
                 count=2),
    Substitution("  statePartitions: 8",
                 "  statePartitions: 2",
                 "one driver core runs every task here: each state partition is a RocksDB instance and a task per "
                 "batch (test_real_node_job's choice too); 8 took minutes to the first batch under load", count=2),
    Substitution("  executor: {instances: 2, cores: 2, memory: 4g}",
                 "  executor: {instances: 0}",
                 "the node has 2 CPUs and the driver requests 1: two 2-core executors cannot be scheduled; "
                 "the driver's local master runs the tasks", count=2),
    Substitution("BROKERS=kafka.example.com:9093      # the brokers' SASL_SSL listener",
                 'BROKERS="$SJ_KAFKA_BROKERS"\n'
                 'kubectl -n analytics create secret generic kafka-ca --from-file=ca.crt="$SJ_KAFKA_CA"',
                 "the test bed's broker: its SASL_SSL listener for pods, by the kafka Service's name (testbed.kafka); "
                 "its certificate is from the test bed's CA, so the job gets that CA in a Secret, as the page's "
                 "private-CA note says"),
    Substitution("<user>", '"$SJ_KAFKA_USER"', "that listener's SCRAM-SHA-512 user"),
    Substitution("<password>", '"$SJ_KAFKA_PASSWORD"', "its password, fresh per test bed"),
    Substitution("sasl: {mechanism: SCRAM-SHA-512, secretRef:",
                 "sasl: {mechanism: SCRAM-SHA-512, caSecretRef: {name: kafka-ca}, secretRef:",
                 "the broker's CA is private (the page's private-CA note)", count=2),
)


def bash_blocks(markdown: str) -> list[str]:
    """The ```bash fenced blocks of a Markdown page, in order, without their fences."""
    return re.findall(r"^```bash\n(.*?)^```$", markdown, flags=re.S | re.M)


def page_script(markdown: str) -> tuple[str, list[str]]:
    """The page's runnable commands with the substitutions applied, and the skipped blocks' first lines;
    PART_BREAK marks where the Kafka part starts.

    Raises when a skip or a substitution no longer matches the page exactly once."""
    head, heading, tail = markdown.partition(f"\n{KAFKA_HEADING}\n")
    assert heading, f"the page has no {KAFKA_HEADING!r} section"
    blocks = bash_blocks(head) + [PART_BREAK] + bash_blocks(tail)
    firsts = [b.splitlines()[0] for b in blocks]
    for first in SKIPPED_BLOCKS:
        assert firsts.count(first) == 1, f"SKIPPED_BLOCKS: no single ```bash block of the page starts with {first!r}"
    runnable = "\n".join(b for b in blocks if b.splitlines()[0] not in SKIPPED_BLOCKS)
    for sub in SUBSTITUTIONS:
        count = runnable.count(sub.page)
        assert count == sub.count, f"SUBSTITUTIONS: {sub.page!r} is in the page's runnable blocks {count} times, not {sub.count}"
        runnable = runnable.replace(sub.page, sub.bed)
    return runnable, [f for f in firsts if f in SKIPPED_BLOCKS]


def page_parts(markdown: str) -> tuple[str, str]:
    """The page's script cut in two at its Kafka section; the first part ends by saving the
    variables it set and its folder to "$SJ_STATE", which the second sources first."""
    script, _ = page_script(markdown)
    first, second = script.split(f"\n{PART_BREAK}\n")
    # the reader's shell variables: NAME=value at a line's start or after a space (REGISTRY=... VERSION=...)
    names = sorted(set(re.findall(r"(?:^|[ \t])([A-Z_][A-Z0-9_]*)=", first, flags=re.M)))
    save = (f'\n{{ declare -p {" ".join(names)} 2>/dev/null || true; printf "cd %q\\n" "$PWD"; }} > "$SJ_STATE"\n'
            if names else '\nprintf "cd %q\\n" "$PWD" > "$SJ_STATE"\n')
    return first + save, f'source "$SJ_STATE"\n{second}'


def preamble(bed: TestBed, workdir: Path) -> str:
    """Shell helpers the substitutions call: the image store's buildah, the node's ctr, a bucket on the bed's S3."""
    assert bed.node is not None
    store = imagestore.store_dir()
    ctr = locate.node_bin_dir() / "ctr"
    return f"""set -euo pipefail
PS4='+ [cluster.md $SECONDS s] '
set -x
sj_buildah() {{ TMPDIR={store}/tmp buildah --root {store}/overlay --runroot {store}/runroot-overlay --storage-driver overlay "$@"; }}
sj_ctr() {{ {ctr} --address {bed.node.socket} --namespace {CONTAINERD_NAMESPACE} "$@"; }}
sj_push_to_node() {{
  local archive={workdir}/push.oci.tar
  rm -f "$archive"
  sj_buildah push --quiet --disable-compression "$1" "oci-archive:$archive:$1"
  sj_ctr images import --platform linux/amd64 --snapshotter overlayfs "$archive"
  rm -f "$archive"
}}
sj_create_bucket() {{
  {sys.executable} -c 'import sys, boto3; boto3.client("s3", endpoint_url=sys.argv[2], region_name=sys.argv[3]).create_bucket(Bucket=sys.argv[1])' \\
    "$1" "$SJ_S3_HOST_ENDPOINT" "$SJ_S3_REGION"
}}
"""


def checkout_copy(dest: Path) -> Path:
    """The files a clone of this checkout has (tracked, and new ones not ignored), as they are now."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def test_the_page_parser_sees_every_command_block_and_the_tables_match_it() -> None:
    script, skipped = page_script(PAGE.read_text())
    assert len(skipped) == len(SKIPPED_BLOCKS)
    first, second = page_parts(PAGE.read_text())
    for command in ("bash scripts/package-chart.sh dist/charts", "kubectl apply -f clicks.yaml"):
        assert command in first
    for command in ("kubectl apply -f windows.yaml", "caSecretRef: {name: kafka-ca}"):
        assert command in second and command not in first
    assert "declare -p" in first and "BUCKET" in first.rsplit("declare -p", 1)[1], "the first part saves its variables"
    assert "aws " not in script and "docker " not in script, "a command that cannot run here is left in the script"


@pytest.fixture
def page_images(real_bed: TestBed) -> Iterator[None]:
    """The tags the page's steps give the images (in the image store and the node's containerd), removed after."""
    yield None
    assert real_bed.node is not None
    version = imagestore.version()
    names = [f"{PAGE_REGISTRY}/streamjob-runtime:{version}", f"{PAGE_REGISTRY}/streamjob-operator:{version}",
             f"{PAGE_REGISTRY}/clicks:1.0.0"]
    real_bed.node.ctr("images", "rm", *names, check=False)
    for name in names:
        subprocess.run(["buildah", "--root", str(imagestore.store_dir() / "overlay"), "--runroot",
                        str(imagestore.store_dir() / "runroot-overlay"), "--storage-driver", "overlay", "rmi", name],
                       capture_output=True, timeout=120)


def run_part(bed: TestBed, tmp_path: Path, name: str, script: str, env: dict[str, str]) -> str:
    """Runs one part of the page as the reader's terminal would (in "reader/"); returns its output, raises on failure."""
    (tmp_path / f"{name}.sh").write_text(preamble(bed, tmp_path) + script)
    log = tmp_path / f"{name}.log"
    started = time.monotonic()
    with open(log, "w") as out:
        # its own process group: a timeout stops the commands it started too (kubectl wait), before the node stops
        page = subprocess.Popen(["bash", str(tmp_path / f"{name}.sh")], cwd=tmp_path / "reader", env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | str = page.wait(timeout=SCRIPT_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(page.pid, signal.SIGKILL)
            page.wait()
            returncode = f"killed after {SCRIPT_TIMEOUT}s"
    print(f"the page's {name} ran in {time.monotonic() - started:.1f}s")
    assert returncode == 0, f"the page's {name} failed (exit {returncode}):\n{log.read_text()[-8000:]}"
    return log.read_text()


def job_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    return dict(client.CustomObjectsApi(api).get_namespaced_custom_object(
        "streamjob.io", "v1alpha1", NAMESPACE, "streamjobs", name).get("status") or {})


def committed(api: client.ApiClient, name: str) -> dict[str, Any]:
    return wait_for(lambda: (s := job_status(api, name)) and (s.get("lastCheckpoint") or {}).get("batchId", -1) >= 0 and s,
                    120, f"a committed batch of {name}")


def check_the_s3_job(bed: TestBed, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    st = committed(api, "clicks")
    assert st["ready"] is True and st["state"] == "Running", st
    driver = core.read_namespaced_pod(st["driverPod"], NAMESPACE)
    assert driver.spec.containers[0].image == f"{PAGE_REGISTRY}/clicks:1.0.0"
    assert driver.spec.service_account_name == "streamjob-driver"
    assert driver.status.container_statuses[0].container_id.startswith("containerd://")
    operators = core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector="app.kubernetes.io/name=streamjob-operator").items
    assert [p.status.phase for p in operators] == ["Running"]
    assert operators[0].spec.containers[0].image == f"{PAGE_REGISTRY}/streamjob-operator:{imagestore.version()}"
    assert operators[0].status.container_statuses[0].container_id.startswith("containerd://")
    assert operators[0].spec.node_name == bed.node_name
    # the checkpoint is in the page's bucket
    keys = [o["Key"] for o in bed.s3_client().list_objects_v2(
        Bucket="my-streamjob-bucket", Prefix="checkpoints/clicks/").get("Contents", [])]
    assert any("/commits/" in k for k in keys), keys[:20]


def make_room(api: client.ApiClient) -> None:
    """Deletes the first job and waits for its driver to go: the node's 2 CPUs hold one 1-core driver beside the operator."""
    client.CustomObjectsApi(api).delete_namespaced_custom_object("streamjob.io", "v1alpha1", NAMESPACE, "streamjobs", "clicks")
    core = client.CoreV1Api(api)
    wait_for(lambda: not [p for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name.startswith("clicks")],
             300, "the clicks job's pods to go")


# The events the Kafka part's job counts: one minute ten minutes ago (user -> events in it), then one event
# 200 s later that moves the watermark (10 s delay) past that minute's end, so the job emits it.
WINDOW_EVENTS = {"ann": 3, "bob": 2}


def seed_topics(broker: KafkaBroker) -> int:
    """Creates the page's topics and writes the events; returns the counted minute's start (epoch ms)."""
    from confluent_kafka import Producer

    broker.create_topic("events")
    broker.create_topic("windows")
    minute = (int(time.time()) // 60 - 10) * 60 * 1000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    offset = 0
    for user, count in WINDOW_EVENTS.items():
        for _ in range(count):
            offset += 1000
            producer.produce("events", key=user.encode(), value=b"click", timestamp=minute + offset)
    producer.produce("events", key=b"late", value=b"click", timestamp=minute + 200_000)
    assert producer.flush(60) == 0
    return minute


def read_windows(broker: KafkaBroker, expected: int, timeout: float = 300) -> list[tuple[str, dict[str, Any]]]:
    """The page's job's output, as a consumer of the page reads it (read_committed): (key, value) records."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    records: list[tuple[str, dict[str, Any]]] = []
    try:
        consumer.subscribe(["windows"])
        end = time.monotonic() + timeout
        settling = False
        while time.monotonic() < end:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                records.append((message.key().decode(), json.loads(message.value())))
            if not settling and len(records) >= expected:
                settling, end = True, time.monotonic() + 15  # a little longer: a duplicate would show up here
    finally:
        consumer.close()
    return records


def diagnose(api: client.ApiClient, tmp_path: Path) -> None:
    core = client.CoreV1Api(api)
    for log in sorted(tmp_path.glob("*.log")):
        print(f"--- {log.name} (tail) ---\n{log.read_text()[-6000:]}")
    for event in core.list_namespaced_event(NAMESPACE).items:
        print(f"event {event.last_timestamp} {event.involved_object.name} {event.reason}: {event.message}")
    for ns in (NAMESPACE, RELEASE_NAMESPACE):
        for pod in core.list_namespaced_pod(ns).items:
            tail = core.read_namespaced_pod_log(pod.metadata.name, ns, tail_lines=60, _preload_content=False).data
            print(f"--- pod {ns}/{pod.metadata.name} ({pod.status.phase}) log tail ---\n{tail.decode(errors='replace')}")


# slow: 4 to 14 minutes on 2 cores (3.6 on an idle machine with the images cached), most of it exporting the 2 GB job image built FROM the runtime image into
# the node's containerd (no registry here to push only the new layer). The default run keeps the parser and
# substitution-table test above, which fails when the page's commands change under the tables.
@pytest.mark.slow
@pytest.mark.timeout(2 * SCRIPT_TIMEOUT + 900)
def test_run_it_on_your_cluster_takes_a_reader_to_a_ready_job_with_s3_then_kafka(real_bed: TestBed, page_images: None,
                                                                                tmp_path: Path) -> None:
    assert real_bed.node is not None and real_bed.s3 is not None and real_bed.kafka is not None
    broker = real_bed.kafka
    assert broker.pod_bootstrap is not None
    for image in (imagestore.runtime_image(), imagestore.operator_image()):
        assert imagestore.inspect(image) is not None, f"{image} was not built: bash scripts/build-images.sh"
    first, second = page_parts(PAGE.read_text())
    (tmp_path / "reader").mkdir()
    [(kafka_user, kafka_password)] = broker.pod_users.items()
    env = {
        **os.environ,
        "KUBECONFIG": str(real_bed.kubeconfig),
        "PATH": os.pathsep.join([str(locate.helm().parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "SJ_CHECKOUT": str(checkout_copy(tmp_path / "checkout")),
        "SJ_STATE": str(tmp_path / "reader-shell.sh"),
        "SJ_S3_ENDPOINT": real_bed.s3_endpoint_for_pods(),
        "SJ_S3_HOST_ENDPOINT": real_bed.s3.endpoint,
        "SJ_S3_REGION": real_bed.s3.region,
        "SJ_S3_ACCESS_KEY": real_bed.s3.access_key,
        "SJ_S3_SECRET_KEY": real_bed.s3.secret_key,
        "AWS_ACCESS_KEY_ID": real_bed.s3.access_key,
        "AWS_SECRET_ACCESS_KEY": real_bed.s3.secret_key,
        "SJ_KAFKA_BROKERS": broker.pod_bootstrap,
        "SJ_KAFKA_USER": kafka_user,
        "SJ_KAFKA_PASSWORD": kafka_password,
        "SJ_KAFKA_CA": str(real_bed.ca_file),
    }
    with real_bed.api_client() as api:
        try:
            run_part(real_bed, tmp_path, "s3-part", first, env)
            check_the_s3_job(real_bed, api)

            make_room(api)
            minute = seed_topics(broker)
            run_part(real_bed, tmp_path, "kafka-part", second, env)
            st = committed(api, "windows")
            assert st["ready"] is True and st["state"] == "Running", st
            records = read_windows(broker, expected=len(WINDOW_EVENTS))
            counted = {key: value["events"] for key, value in records}
            assert counted == WINDOW_EVENTS and len(records) == len(WINDOW_EVENTS), records
            starts = {value["window_start"] for _, value in records}
            assert len(starts) == 1, records  # one minute, the seeded one
            print(f"windows: {records} (minute starting at {minute} ms)")
        except BaseException:
            diagnose(api, tmp_path)
            raise
