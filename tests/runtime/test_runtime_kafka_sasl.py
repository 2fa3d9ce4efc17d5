"""SASL through a real listener: the test bed broker's SASL_PLAINTEXT/PLAIN listener, a
Kafka -> windows -> Kafka job whose source and exactly-once sink both authenticate with
credentials from the environment (as the operator passes them from a Secret).

The right password reads and writes every window once; a wrong one fails the run with a message
naming the brokers and the user, and neither password is in any file the runs wrote (their logs,
termination messages, checkpoint). The atLeastOnce sink (Spark's own Kafka writer, its SASL
options built by job_runtime.kafka.auth) authenticates the same way and writes record headers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtime_harness import RuntimeProcess, run_args, runtime_env
from runtime_kafka import EVENTS, committed_windows, consume_all, kafka_job, load_events_module, reference_windows, topics

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.kafka_names import sasl_env

SASL = {"mechanism": "PLAIN", "securityProtocol": "SASL_PLAINTEXT", "secretRef": {"name": "kafka-credentials"}}


def sasl_job(broker: Any, source: str, target: str, path: Path) -> Path:
    """kafka_windows.yaml with its source and sink on the broker's SASL listener."""
    job = json.loads(kafka_job(broker, source, target, path).read_text())
    job["pipeline"]["sources"][0]["options"]["kafka.bootstrap.servers"] = broker.sasl_bootstrap
    job["pipeline"]["sources"][0]["sasl"] = SASL
    job["pipeline"]["sink"]["kafka"].update({"bootstrapServers": broker.sasl_bootstrap, "sasl": SASL})
    path.write_text(json.dumps(job))
    return path


def credentials_env(user: str, password: str) -> dict[str, str]:
    env = {}
    for role in ("source.events", "sink"):
        user_var, password_var = sasl_env(role)
        env.update({user_var: user, password_var: password})
    return env


def files_containing(root: Path, secret: str) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes())


def sasl_setup(broker: Any, tmp_path: Path) -> tuple[list[Any], str, Path]:
    """The events produced to a fresh source topic, the target topic, the job on the SASL listener."""
    gen = load_events_module()
    source, target = topics(broker)
    events = gen.generate(EVENTS)
    gen.produce(broker.bootstrap, source, events)
    return events, target, sasl_job(broker, source, target, tmp_path / "job.json")


def start_with(processes: list[RuntimeProcess], tmp_path: Path, job: Path, user: str, password: str, label: str) -> RuntimeProcess:
    proc = RuntimeProcess(tmp_path / "runs", run_args(job, (tmp_path / f"ckpt-{label}").as_uri(), name="kafka-sasl"),
                          env=runtime_env(credentials_env(user, password)), label=label)
    processes.append(proc.start())
    return proc


def test_a_job_authenticates_with_sasl_credentials_from_its_environment(kafka_broker, processes, tmp_path: Path) -> None:
    (user, password), = kafka_broker.sasl_users.items()
    events, target, job = sasl_setup(kafka_broker, tmp_path)

    wrong_password = password[::-1] + "x"
    refused = start_with(processes, tmp_path, job, user, wrong_password, "refused")
    assert refused.wait(300) == ExitCode.FAILED, refused.log_tail()
    message = refused.log_text()
    assert f"brokers {kafka_broker.sasl_bootstrap} refused the credentials of user '{user}'" in message, refused.log_tail()

    allowed = start_with(processes, tmp_path, job, user, password, "allowed")
    assert allowed.wait(400) == 0, allowed.log_tail()
    expected = reference_windows(events)
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected

    for secret in (password, wrong_password):
        assert files_containing(tmp_path, secret) == [], f"a password was written to {files_containing(tmp_path, secret)}"


def test_an_at_least_once_sink_writes_with_sasl_credentials_and_headers(kafka_broker, processes, tmp_path: Path) -> None:
    (user, password), = kafka_broker.sasl_users.items()
    events, target, path = sasl_setup(kafka_broker, tmp_path)
    job = json.loads(path.read_text())
    job["pipeline"]["transforms"].append(
        {"name": "tagged", "sql": "SELECT *, map('producer', 'streamjob', 'user', user) AS hdrs FROM per_window"})
    job["pipeline"]["sink"]["kafka"].update({"delivery": "atLeastOnce", "headersColumn": "hdrs"})
    path.write_text(json.dumps(job))

    run = start_with(processes, tmp_path, path, user, password, "at-least-once")
    assert run.wait(400) == 0, run.log_tail()

    # no failure in this run, so at-least-once delivered each window once; the headers came from the column
    expected = reference_windows(events)
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected
    messages = consume_all(kafka_broker.bootstrap, target, sum(expected.values()))
    headers = [sorted(m.headers() or []) for m in messages]
    want = [sorted([("producer", b"streamjob"), ("user", m.key())]) for m in messages]
    assert headers == want, headers[:3]
    assert files_containing(tmp_path, password) == [], f"the password was written to {files_containing(tmp_path, password)}"


def test_executors_producing_authenticate_with_the_credentials_of_their_environment(kafka_broker, processes, tmp_path: Path) -> None:
    """The tasks get the sink's SASL settings as plain values (job_runtime.kafka.task_publish.TaskSink) and
    their credentials from the executor's environment, never from the plan."""
    (user, password), = kafka_broker.sasl_users.items()
    events, target, path = sasl_setup(kafka_broker, tmp_path)
    job = json.loads(path.read_text())
    job["pipeline"]["sink"]["kafka"]["producers"] = "executors"
    path.write_text(json.dumps(job))

    run = start_with(processes, tmp_path, path, user, password, "executors")
    assert run.wait(400) == 0, run.log_tail()
    assert "committed batch" in run.log_text() and "tasks=" in run.log_text(), run.log_tail()
    expected = reference_windows(events)
    assert committed_windows(kafka_broker.bootstrap, target, sum(expected.values())) == expected
    assert files_containing(tmp_path, password) == [], f"the password was written to {files_containing(tmp_path, password)}"
