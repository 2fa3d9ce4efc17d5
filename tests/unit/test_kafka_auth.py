"""Kafka SASL settings built from the driver's environment (job_runtime.kafka.auth), and the job
model's refusals of credentials written inline."""

from __future__ import annotations

import pytest

from job_runtime.kafka import auth as kafka_auth
from streamjob_contract.jobdef import JobDefinitionError, KafkaSasl, parse_job_definition
from streamjob_contract.kafka_names import sasl_env

SCRAM = KafkaSasl.model_validate({"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "creds"}})


def test_spark_options_quote_the_credentials_in_the_jaas_entry(monkeypatch) -> None:
    user_var, password_var = sasl_env("source.events")
    monkeypatch.setenv(user_var, "svc")
    monkeypatch.setenv(password_var, 'p"w\\1')
    options = kafka_auth.spark_options(SCRAM, "source.events", "job.pipeline.sources[0]")
    assert options == {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="svc" password="p\\"w\\\\1";',
    }
    assert kafka_auth.client_conf(SCRAM, "source.events", "x")["sasl.password"] == 'p"w\\1'
    assert kafka_auth.spark_options(None, "sink", "sink.kafka") == {} == kafka_auth.client_conf(None, "sink", "sink.kafka")


def test_a_brokers_ca_reaches_both_clients_as_the_file_the_operator_mounts(monkeypatch) -> None:
    for var in sasl_env("sink"):
        monkeypatch.setenv(var, "x")
    sasl = KafkaSasl.model_validate({"mechanism": "SCRAM-SHA-512", "secretRef": {"name": "creds"},
                                     "caSecretRef": {"name": "my-cluster-cluster-ca-cert"}})
    path = "/etc/streamjob/kafka-ca/my-cluster-cluster-ca-cert/ca.crt"
    assert kafka_auth.client_conf(sasl, "sink", "sink.kafka")["ssl.ca.location"] == path
    options = kafka_auth.spark_options(sasl, "sink", "sink.kafka")
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.location"]) == ("PEM", path)
    # without one, the image's trust store: nothing set
    assert "ssl.ca.location" not in kafka_auth.client_conf(SCRAM, "sink", "sink.kafka")
    assert not [k for k in kafka_auth.spark_options(SCRAM, "sink", "sink.kafka") if "truststore" in k]


def test_the_tasks_plain_settings_give_the_clients_the_same_settings(monkeypatch) -> None:
    for var in sasl_env("sink"):
        monkeypatch.setenv(var, "x")
    for sasl in (SCRAM, KafkaSasl.model_validate({"mechanism": "PLAIN", "secretRef": {"name": "creds"},
                                                  "caSecretRef": {"name": "ca", "key": "c.pem"}})):
        plain = kafka_auth.SaslClient.of(sasl)
        assert kafka_auth.client_conf(plain, "sink", "sink.kafka") == kafka_auth.client_conf(sasl, "sink", "sink.kafka")
        assert kafka_auth.spark_options(plain, "sink", "sink.kafka") == kafka_auth.spark_options(sasl, "sink", "sink.kafka")


def test_a_brokers_ca_without_tls_is_refused() -> None:
    with pytest.raises(ValueError, match="caSecretRef goes with securityProtocol SASL_SSL"):
        KafkaSasl.model_validate({"mechanism": "PLAIN", "securityProtocol": "SASL_PLAINTEXT", "secretRef": {"name": "creds"},
                                  "caSecretRef": {"name": "ca"}})


def test_missing_credentials_name_the_variables_and_the_field(monkeypatch) -> None:
    for var in sasl_env("sink"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(kafka_auth.KafkaAuthError, match=r"sink\.kafka\.sasl: STREAMJOB_KAFKA_SINK_USERNAME and "
                                                        r"STREAMJOB_KAFKA_SINK_PASSWORD not set"):
        kafka_auth.client_conf(SCRAM, "sink", "sink.kafka")


@pytest.mark.parametrize(("source", "message"), [
    ({"options": {"subscribe": "a", "kafka.sasl.jaas.config": "x"}}, "credentials are accepted only by Secret reference"),
    ({"options": {"subscribe": "a"}, "sasl": {"mechanism": "PLAIN"}}, "sasl.secretRef"),
    ({"options": {"subscribe": "a"}, "sasl": {**SCRAM.model_dump(by_alias=True), "password": "x"}}, "sasl.password"),
], ids=["jaas option", "no secretRef", "inline password"])
def test_the_runtime_model_refuses_inline_credentials(source, message) -> None:
    job = {"pipeline": {"sources": [{"name": "events", "kind": "kafka", **source}], "sink": {"kind": "console"}}}
    with pytest.raises(JobDefinitionError, match=message):
        parse_job_definition(job)
