"""The job definition: what a StreamJob's `spec.job` says to run.

One typed source for three readers: the operator embeds these models in the
CRD schema (streamjob_operator.api.crd), the operator writes `spec.job` as
JSON into the job's ConfigMap, and the runtime (job_runtime.main) parses that
file back with `load_job_definition`. Pure: no Spark import here.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from streamjob_contract.kafka_names import KAFKA_CA_MOUNT, ca_file
from streamjob_contract.model import Model, cel, format_validation_error

NAME_PATTERN = r"^[a-z_][a-z0-9_]{0,62}$"
ENTRYPOINT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"
DURATION_PATTERN = r"^[0-9]+ (milliseconds?|seconds?|minutes?|hours?|days?)$"


class SourceKind(str, Enum):
    rate = "rate"
    files = "files"
    kafka = "kafka"


class FileFormat(str, Enum):
    """Formats a files source reads."""

    json = "json"
    csv = "csv"
    parquet = "parquet"


class SinkFormat(str, Enum):
    """Formats the files and foreachBatch sinks write (no csv: it cannot carry nested window columns)."""

    json = "json"
    parquet = "parquet"


class SinkKind(str, Enum):
    files = "files"
    console = "console"
    foreach_batch = "foreachBatch"
    kafka = "kafka"


class Delivery(str, Enum):
    exactly_once = "exactlyOnce"
    at_least_once = "atLeastOnce"


class KafkaProducers(str, Enum):
    """Who sends an exactly-once batch's records (docs/delivery.md, "Who produces")."""

    driver = "driver"
    executors = "executors"


# The broker's default transaction.max.timeout.ms (15 minutes): a longer
# transaction timeout is refused by the broker at the first batch.
MAX_TRANSACTION_TIMEOUT_MS = 900_000
MIN_TRANSACTION_TIMEOUT_MS = 1_000


class SaslMechanism(str, Enum):
    plain = "PLAIN"
    scram_sha_256 = "SCRAM-SHA-256"
    scram_sha_512 = "SCRAM-SHA-512"


class SecurityProtocol(str, Enum):
    sasl_plaintext = "SASL_PLAINTEXT"
    sasl_ssl = "SASL_SSL"


SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"


class CredentialsSecretRef(Model):
    """A Secret holding a user name and a password, each under its own key."""

    name: str = Field(min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN,
                      description="Name of a Secret in the StreamJob's namespace.")
    username_key: str = Field(default="username", alias="usernameKey", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                              description="Key in the Secret that holds the SASL user name.")
    password_key: str = Field(default="password", alias="passwordKey", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                              description="Key in the Secret that holds the SASL password.")


class CaSecretRef(Model):
    """A Secret key holding the CA certificate(s), PEM, that signed the brokers' certificates."""

    name: str = Field(min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN,
                      description="Name of a Secret in the StreamJob's namespace (Strimzi: <cluster>-cluster-ca-cert).")
    key: str = Field(default="ca.crt", min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN,
                     description="Key in the Secret that holds the PEM certificate(s).")


def kafka_ca_file(ref: CaSecretRef) -> str:
    """The path of a caSecretRef's PEM file in the driver and executor pods (the operator mounts the Secret there)."""
    return ca_file(ref.name, ref.key)


class KafkaSasl(Model):
    """SASL authentication to the brokers; the credentials only by Secret reference (docs/delivery.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!has(self.caSecretRef) || !has(self.securityProtocol) || self.securityProtocol == 'SASL_SSL'",
                    "caSecretRef goes with securityProtocol SASL_SSL (SASL_PLAINTEXT has no TLS)", "caSecretRef"),
            ]
        }
    )

    mechanism: SaslMechanism = Field(description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.")
    security_protocol: SecurityProtocol = Field(
        default=SecurityProtocol.sasl_ssl, alias="securityProtocol",
        description="SASL_SSL (TLS to the brokers, the default) or SASL_PLAINTEXT (no TLS: the password "
        "crosses the network in the clear with PLAIN).",
    )
    secret_ref: CredentialsSecretRef = Field(
        alias="secretRef",
        description="Secret with the user name and password. The driver gets them as environment variables "
        "from the Secret (valueFrom.secretKeyRef); they are never in the spec, status, events or logs.",
    )
    ca_secret_ref: CaSecretRef | None = Field(
        default=None, alias="caSecretRef",
        description="The CA that signed the brokers' certificates (PEM), by Secret reference, for SASL_SSL brokers "
        "with a private CA (Strimzi's cluster CA, a company CA). Unset: the runtime image's trust store, which "
        "holds the public CAs (Amazon MSK, Confluent Cloud). The Secret is mounted read-only into the driver "
        f"and the executors at {KAFKA_CA_MOUNT}/<name>/<key>.",
    )

    @model_validator(mode="after")
    def _ca_needs_tls(self) -> "KafkaSasl":
        # the CEL rule above, for files that never pass through the API server
        if self.ca_secret_ref is not None and self.security_protocol != SecurityProtocol.sasl_ssl:
            raise ValueError("caSecretRef goes with securityProtocol SASL_SSL (SASL_PLAINTEXT has no TLS)")
        return self


# Spark reader options that would carry credentials inline: refused, use `sasl`.
INLINE_CREDENTIAL_OPTIONS = ("kafka.sasl.jaas.config",)


class OutputMode(str, Enum):
    append = "append"
    update = "update"
    complete = "complete"


class EventTime(Model):
    column: str = Field(description="Timestamp column that carries event time.", min_length=1)
    watermark_delay: Annotated[str, Field(pattern=DURATION_PATTERN)] = Field(
        alias="watermarkDelay",
        description="How late an event may arrive and still count, as a Spark interval "
        "such as '10 seconds'. Older events are dropped and windows close after it.",
    )


class Source(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.kind != 'files' || (has(self.path) && has(self.format) && has(self.schema))",
                    "a files source needs path, format and schema"),
                cel("self.kind != 'kafka' || ('subscribe' in self.options || 'subscribePattern' in self.options "
                    "|| 'assign' in self.options)",
                    "a kafka source needs options.subscribe, options.subscribePattern or options.assign"),
                cel("self.kind == 'kafka' || !has(self.sasl)", "sasl goes with kind: kafka", "sasl"),
                cel("!has(self.options) || " + " && ".join(f"!('{o}' in self.options)" for o in INLINE_CREDENTIAL_OPTIONS),
                    "credentials are accepted only by Secret reference: set sasl.secretRef, not "
                    + ", ".join(INLINE_CREDENTIAL_OPTIONS), "options"),
            ]
        }
    )

    name: str = Field(pattern=NAME_PATTERN, max_length=63, description="Name the SQL transforms use to refer to this source (a SQL identifier).")
    kind: SourceKind = Field(description="rate (generated rows), files (a directory of json/csv/parquet files) or kafka.")
    format: FileFormat | None = Field(default=None, description="File format of a files source.")
    path: str | None = Field(default=None, max_length=1024, description="Directory a files source reads new files from (file://, s3a://).")
    schema_: str | None = Field(
        default=None, alias="schema", description="Schema of a files source as a Spark DDL string, e.g. 'user STRING, ts TIMESTAMP'."
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Spark reader options (e.g. rowsPerSecond, maxFilesPerTrigger, kafka.bootstrap.servers). A kafka source "
        "without kafka.max.poll.records reads with 10000 (Kafka's default, 500, makes Spark poll every 500 records).",
    )
    event_time: EventTime | None = Field(default=None, alias="eventTime", description="Event-time column and watermark of this source.")
    sasl: KafkaSasl | None = Field(default=None, description="SASL authentication of a kafka source (credentials by Secret reference).")

    @model_validator(mode="after")
    def _kind_needs(self) -> "Source":
        # The same rules as the CEL above, for files that never pass through the API server.
        if self.kind == SourceKind.files and (self.path is None or self.format is None or self.schema_ is None):
            raise ValueError("a files source needs path, format and schema")
        if self.kind == SourceKind.kafka and not {"subscribe", "subscribePattern", "assign"} & set(self.options):
            raise ValueError("a kafka source needs options.subscribe, options.subscribePattern or options.assign")
        if self.kind != SourceKind.kafka and self.sasl is not None:
            raise ValueError("sasl goes with kind: kafka")
        inline = sorted(set(INLINE_CREDENTIAL_OPTIONS) & set(self.options))
        if inline:
            raise ValueError(f"options: credentials are accepted only by Secret reference: set sasl.secretRef, not {', '.join(inline)}")
        return self


class Transform(Model):
    name: str = Field(pattern=NAME_PATTERN, max_length=63, description="Name later transforms and the sink use for this result.")
    sql: str = Field(
        min_length=1,
        description="A Spark SQL SELECT over sources and earlier transforms. Windows: window(ts, '1 minute') "
        "(tumbling), window(ts, '1 minute', '30 seconds') (sliding), session_window(ts, '5 minutes') (session).",
    )


class KafkaSink(Model):
    """Where and how a `kind: kafka` sink writes (docs/delivery.md)."""

    bootstrap_servers: str = Field(
        alias="bootstrapServers", min_length=1, max_length=1024, pattern=r"^[^\s,]+(,[^\s,]+)*$",
        description="Kafka brokers to bootstrap from, host:port[,host:port...].",
    )
    topic: str = Field(
        min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$",
        description="Topic written to; with topicColumn, the topic of rows whose topic column is null. "
        "The exactly-once sink also records its last committed batch against partition 0 of this topic.",
    )
    topic_column: str | None = Field(default=None, alias="topicColumn", min_length=1, description="Column naming each row's topic.")
    key_column: str | None = Field(default=None, alias="keyColumn", min_length=1, description="Column written as the record key (as a string); no key when unset.")
    value_column: str | None = Field(
        default=None, alias="valueColumn", min_length=1,
        description="Column written as the record value (as a string); when unset the whole row (minus the topic, key and headers columns) as JSON.",
    )
    headers_column: str | None = Field(
        default=None, alias="headersColumn", min_length=1, description="Column of map<string,string> written as record headers."
    )
    delivery: Delivery = Field(
        default=Delivery.exactly_once,
        description="exactlyOnce (one Kafka transaction per micro-batch, committed once; consumers read with "
        "isolation.level=read_committed) or atLeastOnce (Spark's built-in Kafka writer: lower latency, duplicates after a failure).",
    )
    transaction_timeout_ms: int = Field(
        default=60_000, alias="transactionTimeoutMs", ge=MIN_TRANSACTION_TIMEOUT_MS, le=MAX_TRANSACTION_TIMEOUT_MS,
        description="transaction.timeout.ms of the exactly-once producer, at most the broker's transaction.max.timeout.ms "
        "(15 minutes by default). It also caps the batch: the job's Kafka sources plan at most timeout in seconds x 10,000 "
        "records a batch (600,000 at the default), x 20,000 with producers: executors (1,200,000); a smaller "
        "maxOffsetsPerTrigger is kept. With producers: driver a Spark partition reads at most 75,000 records "
        "(maxRecordsPerPartition; a smaller one is kept), docs/delivery.md.",
    )
    producers: KafkaProducers = Field(
        default=KafkaProducers.driver,
        description="Who sends an exactlyOnce batch's records. driver: one transaction per batch, visible whole "
        "(records pass through the driver). executors: each task of the batch sends its partition in a transaction "
        "of its own, with a marker per task in the topic streamjob-markers.<namespace>.<name> (created by the job); "
        "faster, visible task by task, and the query must give each task the same rows when a batch is re-run "
        "(docs/delivery.md).",
    )
    sasl: KafkaSasl | None = Field(default=None, description="SASL authentication to the brokers (credentials by Secret reference).")


class Sink(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.kind == 'console' || self.kind == 'kafka' || (has(self.path) && has(self.format))",
                    "files and foreachBatch sinks need path and format"),
                cel("self.kind != 'kafka' || has(self.kafka)",
                    "a kafka sink needs kafka.bootstrapServers and kafka.topic", "kafka"),
                cel("self.kind == 'kafka' || !has(self.kafka)", "kafka settings go with kind: kafka", "kafka"),
            ]
        }
    )

    kind: SinkKind = Field(
        description="files (exactly-once via Spark's file sink log), foreachBatch (each batch written to "
        "path/batch_id=N, overwritten on replay, so idempotent by batch id), kafka (exactly-once by default, "
        "docs/delivery.md) or console."
    )
    input: str | None = Field(default=None, pattern=NAME_PATTERN, description="Transform or source to write; defaults to the last transform.")
    format: SinkFormat | None = Field(default=None, description="Output file format: json or parquet.")
    path: str | None = Field(default=None, description="Output directory (file://, s3a://).")
    output_mode: OutputMode = Field(default=OutputMode.append, alias="outputMode", description="Spark output mode.")
    options: dict[str, str] = Field(default_factory=dict, description="Spark writer options.")
    kafka: KafkaSink | None = Field(default=None, description="Settings of a kafka sink (kind: kafka).")

    @model_validator(mode="after")
    def _kind_needs(self) -> "Sink":
        if self.kind == SinkKind.kafka and self.kafka is None:
            raise ValueError("a kafka sink needs kafka.bootstrapServers and kafka.topic")
        if self.kind != SinkKind.kafka and self.kafka is not None:
            raise ValueError("kafka settings go with kind: kafka")
        if self.kind not in (SinkKind.console, SinkKind.kafka) and (self.path is None or self.format is None):
            raise ValueError("files and foreachBatch sinks need path and format")
        return self


class Pipeline(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!has(self.transforms) || self.transforms.all(t, !self.sources.exists(s, s.name == t.name))",
                    "a transform must not reuse a source's name"),
                cel("!has(self.sink.input) || self.sources.exists(s, s.name == self.sink.input) "
                    "|| (has(self.transforms) && self.transforms.exists(t, t.name == self.sink.input))",
                    "sink.input must name a source or a transform", "sink.input"),
            ]
        }
    )

    # list-type map: the API server itself refuses two entries with one name
    sources: list[Source] = Field(
        min_length=1, max_length=16, description="Input streams; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    transforms: list[Transform] = Field(
        default_factory=list, max_length=32, description="SQL steps, in order; names are unique.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @model_validator(mode="after")
    def _unique_names(self) -> "Pipeline":
        names = [s.name for s in self.sources] + [t.name for t in self.transforms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"names must be unique across sources and transforms: {', '.join(dupes)}")
        return self
    sink: Sink = Field(description="Where the result goes.")

    @model_validator(mode="after")
    def _names_resolve(self) -> "Pipeline":
        names = [s.name for s in self.sources] + [t.name for t in self.transforms]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"names must be unique across sources and transforms: {', '.join(duplicates)}")
        if self.sink.input is not None and self.sink.input not in names:
            raise ValueError(f"sink.input: no source or transform named {self.sink.input!r}")
        return self


class JobDefinition(Model):
    """What to run: exactly one of a Python entrypoint or a declarative pipeline."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("has(self.entrypoint) != has(self.pipeline)", "set exactly one of job.entrypoint or job.pipeline"),
                cel("!has(self.pipeline) || (!has(self.sources) && !has(self.sink))",
                    "job.sources and job.sink go with job.entrypoint; a pipeline declares its own"),
            ]
        }
    )

    entrypoint: str | None = Field(
        default=None,
        pattern=ENTRYPOINT_PATTERN,
        description="Python entrypoint 'package.module:function'. It receives a JobContext and returns "
        "a started StreamingQuery or a DataStreamWriter.",
    )
    python_path: list[str] = Field(
        default_factory=list, alias="pythonPath", max_length=16, description="Extra directories put on sys.path before importing the entrypoint."
    )
    pipeline: Pipeline | None = Field(default=None, description="A declarative pipeline: sources, SQL transforms, a sink.")
    config: dict[str, str] = Field(default_factory=dict, description="Free-form settings handed to the entrypoint as context.config.")
    sources: list[Source] | None = Field(
        default=None, max_length=16,
        description="Sources an entrypoint job opens by name with context.source(name) (entrypoint jobs only).",
    )
    sink: Sink | None = Field(
        default=None, description="Sink an entrypoint job writes to with context.sink(df) (entrypoint jobs only)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> "JobDefinition":
        if (self.entrypoint is None) == (self.pipeline is None):
            raise ValueError("set exactly one of job.entrypoint or job.pipeline")
        if self.pipeline is not None and (self.sources is not None or self.sink is not None):
            raise ValueError("job.sources and job.sink go with job.entrypoint; a pipeline declares its own")
        if self.sources:
            names = [s.name for s in self.sources]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"sources: names must be unique: {', '.join(duplicates)}")
        return self


class JobDefinitionError(ValueError):
    """A job definition file that cannot be used; the message names the file and field."""


def parse_job_definition(data: Any, where: str = "job") -> JobDefinition:
    try:
        return JobDefinition.model_validate(data)
    except ValidationError as err:
        raise JobDefinitionError(format_validation_error(where, err)) from None


def load_job_definition(path: str | Path) -> JobDefinition:
    """Read a job definition from a JSON or YAML file (a StreamJob's spec.job)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise JobDefinitionError(f"{p}: cannot read job definition: {err.strerror}") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise JobDefinitionError(f"{p}: not valid JSON/YAML: {err}") from None
    return parse_job_definition(data, where=f"{p}: job")


def declared_sources(job: JobDefinition) -> list[Source]:
    """The job's sources: its pipeline's, or those an entrypoint job declares."""
    return job.pipeline.sources if job.pipeline is not None else job.sources or []


def declared_sink(job: JobDefinition) -> Sink | None:
    """The job's sink: its pipeline's, or the one an entrypoint job declares (if any)."""
    return job.pipeline.sink if job.pipeline is not None else job.sink


def sasl_clients(job: JobDefinition) -> list[tuple[str, KafkaSasl]]:
    """Every Kafka client of `job` that authenticates with SASL, as (role for `sasl_env`, settings)."""
    sink = declared_sink(job)
    found = [(f"source.{s.name}", s.sasl) for s in declared_sources(job) if s.sasl is not None]
    if sink is not None and sink.kafka is not None and sink.kafka.sasl is not None:
        found.append(("sink", sink.kafka.sasl))
    return found


def kafka_ca_secrets(job: JobDefinition) -> dict[str, list[str]]:
    """Every Secret a Kafka client of `job` takes its brokers' CA from: name -> its keys used, sorted."""
    found: dict[str, set[str]] = {}
    for _, sasl in sasl_clients(job):
        if sasl.ca_secret_ref is not None:
            found.setdefault(sasl.ca_secret_ref.name, set()).add(sasl.ca_secret_ref.key)
    return {name: sorted(keys) for name, keys in sorted(found.items())}


def dump_job_definition(job: JobDefinition) -> str:
    """The canonical JSON the operator writes into the job's ConfigMap."""
    return job.model_dump_json(by_alias=True, exclude_none=True)
