"""The Spark confs the runtime owns: the one list both the runtime and the CRD refuse.

Read by job_runtime.query.session (`engine_conf` refuses a --conf that sets one of
them) and by streamjob_operator.api.spec (a CEL rule on `spec.sparkConf` per
key, so `kubectl apply` refuses the same keys with the same reason before any
driver starts). Also the keys that carry credentials (CREDENTIAL_CONF_PATTERN), which
the CRD refuses so a secret never stands in a spec, a status or a pod's
arguments. Pure: data and message text only.

A key is owned when a StreamJob field or the runtime's own design decides it
and a user value would either break the job or be silently ignored:
- spark.sql.shuffle.partitions is the number of state partitions, pinned into
  the checkpoint on the first batch; it changes only through a savepoint and an
  offline state repartition.
- the state store provider must be RocksDB: savepoints copy and restore its
  files, and changelog checkpointing is set for it.
- the checkpoint location is set on the query itself, so the session default
  would be ignored while the user believes the checkpoint moved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class OwnedConf:
    """A Spark conf the runtime sets itself: who sets it, and why it cannot be overridden."""

    key: str
    option: str  # the runtime's command-line option (or "the runtime") that sets it
    field: str  # the StreamJob field that sets it, for users of the CRD
    why: str

    @property
    def rule(self) -> str:
        """The refusal, word for word the same in the runtime and at apply time."""
        setter = self.option if self.option == self.field else f"{self.option} ({self.field})"
        return f"is set by {setter} and must not be overridden: {self.why}"


OWNED_CONFS: tuple[OwnedConf, ...] = (
    OwnedConf(
        key="spark.sql.shuffle.partitions",
        option="--state-partitions",
        field="spec.statePartitions",
        why="Spark pins it into the checkpoint on the first batch; change it with a savepoint and an offline repartition",
    ),
    OwnedConf(
        key="spark.sql.streaming.stateStore.providerClass",
        option="the runtime",
        field="the runtime",
        why="savepoints copy and restore the RocksDB state store's files",
    ),
    OwnedConf(
        key="spark.sql.streaming.checkpointLocation",
        option="--checkpoint",
        field="spec.checkpoint.location",
        why="the query's own checkpoint location wins, so this one would be ignored",
    ),
)

OWNED_KEYS: tuple[str, ...] = tuple(c.key for c in OWNED_CONFS)


def owned(key: str) -> OwnedConf | None:
    """The owned conf named `key`, or None when the user may set it."""
    return next((c for c in OWNED_CONFS if c.key == key), None)


# Keys whose value is a credential. The words are Spark's own idea of a sensitive
# key (the default of spark.redaction.regex: secret, password, token, access key),
# plus the Hadoop and Kafka spellings it misses: fs.azure.account.key.*,
# fs.gs.auth.service.account.private.key, fs.s3a.encryption.key (SSE-C) and
# sasl.jaas.config. RE2 syntax, so the CRD's CEL rule uses the very same pattern.
CREDENTIAL_CONF_PATTERN = r"(?i)(secret|password|token|access[.]?key|private[.]?key|account[.]key|encryption[.]key|jaas)"
# ...except a key that configures how a credential is found rather than holding one: a file
# (spark.authenticate.secret.file, ...oauthTokenFile: a path to a mounted Secret, the way to
# pass such a value), a provider or binding class (fs.s3a.aws.credentials.provider,
# fs.s3a.delegation.token.binding), a mechanism or a switch (spark.kafka.clusters.*.sasl.token.mechanism).
CREDENTIAL_EXEMPT_PATTERN = r"(?i)(file|path|providers?|binding|mechanism|enabled|class|type)$"
CREDENTIAL_REFUSAL = (
    "holds a credential, and sparkConf is readable by anyone who can read the StreamJob (its status keeps a copy) "
    "and becomes the driver's command line: put S3 keys in a Secret named by spec.s3.credentialsSecret, Kafka "
    "credentials in one named by sasl.secretRef, and anything else in a Secret mounted through spec.podTemplate, "
    "pointing the conf at its file (a key naming a file, a provider class or a mechanism is allowed)"
)


def carries_secret(key: str) -> bool:
    """True when `key`'s value would be a credential in plain text (see CREDENTIAL_CONF_PATTERN)."""
    return re.search(CREDENTIAL_CONF_PATTERN, key) is not None and re.search(CREDENTIAL_EXEMPT_PATTERN, key) is None
