"""Kafka through the operator: a Kafka -> 10-second windows -> Kafka StreamJob (exactly-once sink),
both ends authenticated with SASL credentials from a Secret (env from secretKeyRef, resolved by the
kubelet), deployed by the operator; in the slow run also upgraded (spec change -> savepoint ->
restore) and moved to more state partitions (savepoint -> offline repartition -> restore), with
input arriving between the steps, and run through its broker going down mid-run (the driver fails
naming the broker, the operator restarts it per spec.restartPolicy until the broker is back).

The job runs on the real node against the module's test bed broker (``REAL_BED_KAFKA``): the drivers
dial its ``PODS`` listener through the ``kafka`` Service, SCRAM-SHA-512 over TLS with the bed's CA from
a Secret (``caSecretRef``), as on a cluster; the test produces and reads on the host's plain listener.

The output is read back as a read_committed consumer and compared, as a multiset, with windows
computed without Spark from the produced events (runtime_kafka.reference_windows): 0 missing, 0
duplicated. The password is nowhere in the driver pods' specs, the StreamJob's status, its events
or the drivers' logs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from streamjob_contract.lifecycle import LifecycleState

from testbed import TestBed
from testbed.waiting import wait_for

from streamjob_e2e import DEV_IMAGE, DriverCounter, Jobs, Operator, rate_job

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from runtime_kafka import EVENTS, FAIL_FAST, committed_windows, load_events_module, reference_windows, topics  # noqa: E402

REAL_BED_KAFKA = True  # and reach the bed's broker through the kafka Service

REPO = Path(__file__).resolve().parents[2]
SECRET = "kafka-credentials"
CA_SECRET = "kafka-ca"
WINDOWS_TIMEOUT = 300.0


def kafka_windows_job(testbed: TestBed, broker: Any, prefix: str, source: str, target: str,
                      source_options: dict[str, str] | None = None, **sink: Any) -> dict[str, Any]:
    """examples/jobs/kafka_windows.yaml on the broker's PODS listener (SCRAM over TLS), checkpoints and savepoints in S3."""
    pipeline = yaml.safe_load((REPO / "examples" / "jobs" / "kafka_windows.yaml").read_text())["pipeline"]
    sasl = {"mechanism": "SCRAM-SHA-512", "securityProtocol": "SASL_SSL", "secretRef": {"name": SECRET},
            "caSecretRef": {"name": CA_SECRET}}
    events = pipeline["sources"][0]
    events["options"].update({"kafka.bootstrap.servers": broker.pod_bootstrap, "subscribe": source, **(source_options or {})})
    events["sasl"] = sasl
    pipeline["sink"]["kafka"].update({"bootstrapServers": broker.pod_bootstrap, "topic": target, "sasl": sasl, **sink})
    return rate_job("kafka", testbed, prefix=prefix, job={"pipeline": pipeline})


@pytest.fixture
def broker(testbed: TestBed) -> Any:
    """The module's test bed broker: pods reach its PODS listener, the test its plain one on the host."""
    assert testbed.kafka is not None and testbed.kafka.pod_bootstrap is not None
    return testbed.kafka


def password_of(broker: Any) -> str:
    (_, password), = broker.pod_users.items()
    return str(password)


class KafkaJob:
    """The job's input (produced in parts) and its output, compared with the reference of what was produced."""

    def __init__(self, broker: Any, jobs: Jobs) -> None:
        self.broker, self.jobs = broker, jobs
        self.gen = load_events_module()
        self.events = self.gen.generate(EVENTS)
        self.produced = 0
        self.source, self.target = topics(broker)

    def produce(self, upto: int) -> None:
        self.gen.produce(self.broker.bootstrap, self.source, self.events[self.produced:upto])
        self.produced = upto

    def wait_all_windows(self) -> None:
        """Every window the produced input closes is visible, each once and nothing else."""
        expected = reference_windows(self.events[: self.produced])
        total = sum(expected.values())
        wait_for(lambda: sum(committed_windows(self.broker.bootstrap, self.target).values()) >= total, WINDOWS_TIMEOUT,
                 f"all {total} windows visible to read_committed consumers")
        seen = committed_windows(self.broker.bootstrap, self.target, total)
        assert seen == expected, f"missing {expected - seen}, duplicated or unexpected {seen - expected}"

    def wait_idle(self) -> int:
        """The last batch, once committed and no other follows within two trigger intervals (all input consumed)."""
        last: list[int] = []

        def settled() -> int | None:
            batch = (self.jobs.status("kafka").get("lastCheckpoint") or {}).get("batchId", -1)
            last.append(batch)
            return batch if len(last) >= 3 and last[-3] == batch else None

        return int(wait_for(settled, 120, "the job to finish its input", interval=2.0))


def deploy(testbed: TestBed, broker: Any, jobs: Jobs, namespace: str, core_v1: client.CoreV1Api, **options: Any) -> KafkaJob:
    (user, password), = broker.pod_users.items()
    core_v1.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET), string_data={"username": user, "password": password}))
    core_v1.create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=CA_SECRET), string_data={"ca.crt": testbed.ca_file.read_text()}))
    job = KafkaJob(broker, jobs)
    job.produce(EVENTS // 3)
    jobs.apply(kafka_windows_job(testbed, broker, f"e2e/{namespace}/kafka", job.source, job.target, **options))
    jobs.wait_ready("kafka", driverPod="kafka-driver-1")
    return job


def assert_password_only_by_reference(testbed: TestBed, broker: Any, jobs: Jobs, namespace: str,
                                      core_v1: client.CoreV1Api, driver: int) -> None:
    """The password is in no spec of the driver pod ``kafka-driver-<driver>``, nor in its log (read while it runs: the
    real node drops a deleted pod's log), nor in the job's status and events."""
    password = password_of(broker)
    pod = core_v1.read_namespaced_pod(f"kafka-driver-{driver}", namespace)
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["STREAMJOB_KAFKA_SINK_PASSWORD"].value_from.secret_key_ref.name == SECRET
    assert env["STREAMJOB_KAFKA_SOURCE_EVENTS_PASSWORD"].value is None
    log = testbed.pod_log(namespace, f"kafka-driver-{driver}")
    assert "streamjob-runtime" in log or "Spark" in log, log[-2000:]  # the log read is the driver's, not an empty one
    texts = [json.dumps(client.ApiClient().sanitize_for_serialization(pod)), json.dumps(jobs.status("kafka")),
             json.dumps(jobs.events("kafka")), log]
    assert not [t[:200] for t in texts if password in t]


def test_a_kafka_job_with_sasl_from_a_secret_runs_exactly_once_under_the_operator(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, broker: Any,
    namespace: str, core_v1: client.CoreV1Api,
) -> None:
    job = deploy(testbed, broker, jobs, namespace, core_v1)
    job.wait_all_windows()
    job.produce(EVENTS // 2)  # more input to the running job
    job.wait_all_windows()
    assert_password_only_by_reference(testbed, broker, jobs, namespace, core_v1, driver=1)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three driver starts, two savepoints and a repartition on a loaded machine
def test_a_kafka_job_upgrades_and_repartitions_through_the_operator_exactly_once(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, broker: Any,
    namespace: str, core_v1: client.CoreV1Api,
) -> None:
    job = deploy(testbed, broker, jobs, namespace, core_v1)
    jobs.wait("kafka", "a committed batch", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)
    assert_password_only_by_reference(testbed, broker, jobs, namespace, core_v1, driver=1)

    # upgrade while input flows: a spec change -> stop with savepoint -> a new driver restores it (offsets included)
    job.produce(2 * EVENTS // 3)
    jobs.patch("kafka", {"image": DEV_IMAGE.replace("0.1.0", "0.1.1")})
    upgraded = jobs.wait_ready("kafka", driverPod="kafka-driver-2")
    assert upgraded["lastSavepoint"]["trigger"] == "upgrade" and upgraded["restoredFrom"] == upgraded["lastSavepoint"]["path"]
    job.wait_all_windows()
    assert_password_only_by_reference(testbed, broker, jobs, namespace, core_v1, driver=2)

    # state partitions 2 -> 3: savepoint -> offline repartition -> restore. Spark repartitions only a checkpoint whose
    # last batch committed, so the savepoint is taken with the input consumed (a stop that interrupts a batch leaves it
    # planned, and the runtime refuses the repartition: docs/operator.md)
    job.wait_idle()
    jobs.patch("kafka", {"statePartitions": 3})
    repartitioned = jobs.wait_ready("kafka", driverPod="kafka-driver-3")
    assert repartitioned["restoredFrom"] == repartitioned["lastSavepoint"]["path"] != upgraded["lastSavepoint"]["path"]

    # the open windows came through the repartition: the rest of the input closes them
    job.produce(EVENTS)
    job.wait_all_windows()
    assert drivers.max_seen == 1
    assert_password_only_by_reference(testbed, broker, jobs, namespace, core_v1, driver=3)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_broker_down_mid_run_the_operator_restarts_the_job_then_each_window_once(
    testbed: TestBed, operator: Operator, jobs: Jobs, drivers: DriverCounter, s3_secret: str, broker: Any,
    namespace: str, core_v1: client.CoreV1Api,
) -> None:
    # the module's own bed's broker: stopped and restarted in the module's last test
    job = deploy(testbed, broker, jobs, namespace, core_v1, source_options=FAIL_FAST, transactionTimeoutMs=15000)
    jobs.wait("kafka", "a committed batch", lambda st: (st.get("lastCheckpoint") or {}).get("batchId", -1) >= 1)

    # the broker goes down: the driver fails naming the broker and the topic, the operator restarts it (with backoff)
    broker.stop()
    failed = jobs.wait("kafka", "a restart after the broker went down", lambda st: st.get("totalRestarts", 0) >= 1, timeout=600)
    assert broker.pod_bootstrap in (failed.get("lastError") or ""), failed
    reasons = [reason for reason, _ in jobs.events("kafka")]
    assert "RestartPolicyExhausted" not in reasons, jobs.events("kafka")

    # the broker is back: a restarted driver resumes from the checkpoint and every window is published once
    broker.restart()
    job.produce(EVENTS)
    running = jobs.wait("kafka", "running again", lambda st: st.get("state") == LifecycleState.running and st.get("ready") is True, timeout=600)
    job.wait_all_windows()
    assert drivers.max_seen == 1
    started = int(str(running["driverPod"]).rsplit("-", 1)[1])
    assert started >= 2, running
    assert_password_only_by_reference(testbed, broker, jobs, namespace, core_v1, driver=started)
