"""SASL credentials of the Kafka clients, from the driver's environment into client settings.

The operator puts each Kafka client's user name and password into the driver's
environment from the Secret the spec names (valueFrom.secretKeyRef, variables
named by streamjob_contract.kafka_names.sasl_env); this module turns them into the
settings of the two kinds of client, in memory only:

- librdkafka (confluent-kafka: the exactly-once sink's producer and marker
  consumer, the preflight check): security.protocol, sasl.mechanism,
  sasl.username, sasl.password, and with a caSecretRef ssl.ca.location;
- Spark's Kafka connector (Kafka sources, the atLeastOnce sink): the
  `kafka.`-prefixed options, the credentials in `kafka.sasl.jaas.config`, and
  with a caSecretRef a PEM trust store (`kafka.ssl.truststore.*`).

A caSecretRef's file is where the operator mounts the Secret in the driver and
the executors (streamjob_contract.kafka_names.ca_file).

The settings come as the spec's `KafkaSasl` on the driver, or as a `SaslClient` (the same
settings, plain: what the executors' tasks get, so their Python workers import no pydantic).

Nothing here logs a setting. `check` connects once before the query starts, so
wrong credentials fail the run with a message naming the brokers, the user and
the mechanism, never the password.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamjob_contract.kafka_names import ca_file, sasl_env

if TYPE_CHECKING:
    from streamjob_contract.jobdef import KafkaSasl

CHECK_TIMEOUT = 30.0  # seconds for the preflight metadata request

_LOGIN_MODULES = {  # by SASL mechanism (streamjob_contract.jobdef.SaslMechanism's values)
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


@dataclass(frozen=True)
class SaslClient:
    """A `sasl` block's settings without credentials (those come from the environment), as plain values."""

    mechanism: str
    security_protocol: str
    ca_file: str | None = None

    @classmethod
    def of(cls, sasl: KafkaSasl | SaslClient) -> SaslClient:
        if isinstance(sasl, SaslClient):
            return sasl
        ref = sasl.ca_secret_ref
        return cls(sasl.mechanism.value, sasl.security_protocol.value, ca_file(ref.name, ref.key) if ref is not None else None)


class KafkaAuthError(RuntimeError):
    """The brokers refused the credentials, or the credentials are not in the environment."""


def credentials(role: str, where: str, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(user name, password) of one client from the environment; `where` is its field path for errors."""
    env = os.environ if environ is None else environ
    user_var, password_var = sasl_env(role)
    missing = [v for v in (user_var, password_var) if not env.get(v)]
    if missing:
        raise KafkaAuthError(f"{where}.sasl: {' and '.join(missing)} not set (the operator sets them from sasl.secretRef)")
    return env[user_var], env[password_var]


def client_conf(sasl: KafkaSasl | SaslClient | None, role: str, where: str) -> dict[str, Any]:
    """librdkafka settings for SASL (empty without `sasl`)."""
    if sasl is None:
        return {}
    plain = SaslClient.of(sasl)
    user, password = credentials(role, where)
    conf = {
        "security.protocol": plain.security_protocol,
        "sasl.mechanism": plain.mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if plain.ca_file is not None:
        conf["ssl.ca.location"] = plain.ca_file
    return conf


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spark_options(sasl: KafkaSasl | SaslClient | None, role: str, where: str) -> dict[str, str]:
    """Spark Kafka connector options for SASL (empty without `sasl`)."""
    if sasl is None:
        return {}
    plain = SaslClient.of(sasl)
    user, password = credentials(role, where)
    jaas = f"{_LOGIN_MODULES[plain.mechanism]} required username={_jaas_quote(user)} password={_jaas_quote(password)};"
    options = {
        "kafka.security.protocol": plain.security_protocol,
        "kafka.sasl.mechanism": plain.mechanism,
        "kafka.sasl.jaas.config": jaas,
    }
    if plain.ca_file is not None:  # the Java client reads a PEM trust store (KIP-651)
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = plain.ca_file
    return options


def check(bootstrap: str, sasl: KafkaSasl | None, role: str, where: str, timeout: float = CHECK_TIMEOUT) -> None:
    """Authenticates once to `bootstrap` (a metadata request); raises KafkaAuthError naming the brokers
    when the credentials are refused. A broker that is down is not this check's business: the query's
    own errors report it."""
    if sasl is None:
        return
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())

    conf = {"bootstrap.servers": bootstrap, **client_conf(sasl, role, where), "error_cb": on_error, "log_level": 0}
    admin = AdminClient(conf)
    deadline = time.monotonic() + timeout
    while not refused and time.monotonic() < deadline:
        admin.poll(0.2)  # serves error_cb: librdkafka reports a refused login there
        if refused:
            break
        try:
            admin.list_topics(timeout=2)
            return  # authenticated
        except KafkaException:
            continue
    if refused:
        user, password = credentials(role, where)
        reason = refused[0].replace(password, "***")  # librdkafka does not echo it; stay sure
        raise KafkaAuthError(
            f"{where}.sasl: brokers {bootstrap} refused the credentials of user {user!r} "
            f"(mechanism {sasl.mechanism.value}, {sasl.security_protocol.value}): {reason}"
        )
