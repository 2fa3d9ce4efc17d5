"""Names the operator and the runtime share for a Kafka client's SASL settings, without pydantic.

The operator puts each client's user name and password into the driver's (and executors')
environment under `sasl_env(role)` and mounts each caSecretRef at `ca_file(name, key)`;
the runtime's Kafka clients read them there. The executors' Python workers import this
(through job_runtime.kafka.auth) and not `jobdef`, whose models cost each worker about
0.2 s of CPU and 12 MB to import.
"""

from __future__ import annotations

KAFKA_CA_MOUNT = "/etc/streamjob/kafka-ca"  # where the driver and executors find each caSecretRef: <mount>/<name>/<key>


def ca_file(name: str, key: str) -> str:
    """The path of a caSecretRef's PEM file (Secret `name`, key `key`) in the driver and executor pods."""
    return f"{KAFKA_CA_MOUNT}/{name}/{key}"


def sasl_env(role: str) -> tuple[str, str]:
    """The driver's environment variables (user name, password) for one Kafka client:
    `role` is "sink" or "source.<name>" (source names are SQL identifiers)."""
    stem = "STREAMJOB_KAFKA_" + role.replace(".", "_").upper()
    return f"{stem}_USERNAME", f"{stem}_PASSWORD"
