"""StreamJob spec: the typed source of truth for the CRD schema and for parsing.

Read by the CRD generator (api.crd), by the kopf glue to parse `spec`, and by
the pure decision code. Field names are the CRD's camelCase via aliases; CEL
rules for cross-field checks ride along in `json_schema_extra` so the API
server refuses a bad manifest at `kubectl apply`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from streamjob_contract.jobdef import JobDefinition
from streamjob_contract.model import Model, cel, format_validation_error
from streamjob_operator.api.podtemplate import MAIN_CONTAINER, LocalObjectReference, PodTemplate
from streamjob_contract.sparkconf import CREDENTIAL_CONF_PATTERN, CREDENTIAL_EXEMPT_PATTERN, CREDENTIAL_REFUSAL, OWNED_CONFS, carries_secret

API_GROUP = "streamjob.io"
API_VERSION = "v1alpha1"
KIND = "StreamJob"
PLURAL = "streamjobs"
SINGULAR = "streamjob"
SHORT_NAMES = ["sj"]

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"
MEMORY_PATTERN = r"^[0-9]+[kmgt]$"
# a Kubernetes CPU quantity as Spark's request.cores takes it: millicores (500m) or cores with up to 3 decimals (0.5, 2)
CPU_QUANTITY_PATTERN = r"^([0-9]{1,6}m|[0-9]{1,2}(\.[0-9]{1,3})?)$"
GO_DURATION_PATTERN = r"^([0-9]+(s|m|h|d))+$"
# bounds the cost of the CEL rule that reads every sparkConf key
MAX_SPARK_CONF = 256


def owned_conf_rules() -> list[dict[str, Any]]:
    """CEL rules on spec, one per Spark conf the runtime owns, with the runtime's own words.

    Built from streamjob_contract.sparkconf, the list job_runtime.query.session refuses, so
    `kubectl apply` refuses exactly what a driver would exit 12 on. They sit on
    spec rather than on the map so the field path reads
    `spec.sparkConf[spark.sql.shuffle.partitions]`.
    """
    return [
        {
            "rule": f"!has(self.sparkConf) || !('{owned.key}' in self.sparkConf)",
            "message": owned.rule,
            "fieldPath": f".sparkConf['{owned.key}']",
            "reason": "FieldValueForbidden",
        }
        for owned in OWNED_CONFS
    ]


def secret_conf_rule() -> dict[str, Any]:
    """A CEL rule on spec.sparkConf refusing keys that carry credentials, naming the first such key.

    The pattern is streamjob_contract.sparkconf's (RE2, as CEL's matches() wants);
    parse_spec applies the same test to specs stored before the rule existed.
    """
    # CEL string literals: the patterns single-quoted, the message double-quoted
    assert "'" not in CREDENTIAL_CONF_PATTERN + CREDENTIAL_EXEMPT_PATTERN and '"' not in CREDENTIAL_REFUSAL and "\\" not in CREDENTIAL_REFUSAL
    secret = f"k.matches('{CREDENTIAL_CONF_PATTERN}') && !k.matches('{CREDENTIAL_EXEMPT_PATTERN}')"
    return {
        "rule": f"self.all(k, !({secret}))",
        "message": f"a sparkConf key {CREDENTIAL_REFUSAL}",  # if the expression below cannot be evaluated
        "messageExpression": f'"sparkConf[" + self.filter(k, {secret})[0] + "] {CREDENTIAL_REFUSAL}"',
        "reason": "FieldValueForbidden",
    }


def file_checkpoint_rule() -> dict[str, Any]:
    """A file:// checkpoint needs a volume (not an emptyDir) mounted at it, or a pod restart loses the job's state.

    Checked on spec.podTemplate, the template of the driver and the executors
    (executors write the state store's files into the checkpoint too).
    """
    loc = "self.checkpoint.location"
    tpl = "self.podTemplate.spec"
    mounted = (f"(({loc} + '/').startsWith('file://' + m.mountPath + (m.mountPath.endsWith('/') ? '' : '/'))"
               f" && {tpl}.volumes.exists(v, v.name == m.name && !has(v.emptyDir)))")
    return cel(
        f"!{loc}.startsWith('file://') || (has(self.podTemplate) && has({tpl}) && has({tpl}.containers)"
        f" && has({tpl}.volumes) && {tpl}.containers.exists(c, c.name == '{MAIN_CONTAINER}'"
        f" && has(c.volumeMounts) && c.volumeMounts.exists(m, {mounted})))",
        "a file:// checkpoint on the pod's own disk is lost when the pod is replaced: mount a volume that outlives "
        f"the pod (a PersistentVolumeClaim, NFS, hostPath; not an emptyDir) at the checkpoint path or a parent of it in "
        f"spec.podTemplate.spec.containers['{MAIN_CONTAINER}'].volumeMounts, or use s3a://",
        ".checkpoint.location",
    )


MAX_FAILURES = 100  # spec.restartPolicy.maxFailures' maximum


class UpgradeMode(str, Enum):
    savepoint = "savepoint"
    last_state = "last-state"
    stateless = "stateless"


class DesiredState(str, Enum):
    running = "running"
    suspended = "suspended"


class RestartPolicyType(str, Enum):
    never = "Never"
    fixed_delay = "FixedDelay"
    exponential_backoff = "ExponentialBackoff"
    failure_rate = "FailureRate"


class SecretKeyRef(Model):
    name: str = Field(min_length=1, max_length=253, description="Name of a Secret in the StreamJob's namespace.")
    access_key_id_key: str = Field(
        default="AWS_ACCESS_KEY_ID", alias="accessKeyIdKey", description="Key in the Secret that holds the access key id."
    )
    secret_access_key_key: str = Field(
        default="AWS_SECRET_ACCESS_KEY", alias="secretAccessKeyKey", description="Key in the Secret that holds the secret access key."
    )


class S3Settings(Model):
    endpoint: str | None = Field(
        default=None, pattern=r"^https?://", description="S3 endpoint URL for S3-compatible stores; unset means AWS."
    )
    region: str = Field(default="us-east-1", description="S3 region.")
    path_style_access: bool = Field(default=False, alias="pathStyleAccess", description="Use path-style addressing (most S3-compatible servers need it).")
    credentials_secret: SecretKeyRef | None = Field(
        default=None,
        alias="credentialsSecret",
        description="Secret holding the S3 credentials. Credentials are accepted only by reference, never inline; "
        "unset means the pod's ambient credentials (e.g. IRSA).",
    )


class Resources(Model):
    cores: int = Field(default=1, ge=1, le=64, description="CPU cores: the tasks Spark runs at once in this pod, and its CPU "
                       "request unless coreRequest is set.")
    core_request: str | None = Field(
        default=None, alias="coreRequest", pattern=CPU_QUANTITY_PATTERN,
        description="CPU the pod requests from the scheduler, as a Kubernetes quantity (500m, 0.5, 2); unset means cores. "
        "Lower it to pack pods whose tasks mostly wait (on Kafka, on S3) onto fewer nodes; Spark still runs cores tasks at once.",
    )
    memory: str = Field(default="1g", pattern=MEMORY_PATTERN, description="JVM heap in Spark's notation, e.g. 1g or 512m.")
    memory_overhead: str | None = Field(default=None, alias="memoryOverhead", pattern=MEMORY_PATTERN, description="Non-heap memory added to the pod.")
    pod_template: PodTemplate | None = Field(
        default=None, alias="podTemplate",
        description="Pod template of this role only, merged over spec.podTemplate (its fields win).",
    )


class ExecutorSpec(Resources):
    instances: int = Field(default=1, ge=0, le=1000, description="Number of executor pods (0 runs tasks in the driver).")


class CheckpointSpec(Model):
    location: str = Field(
        pattern=r"^(s3a|file)://.+", max_length=1024,
        description="Where Spark keeps the job's checkpoint (offsets, commits, state): s3a:// or file://.",
    )
    trigger_interval: str = Field(
        default="10 seconds", alias="triggerInterval", pattern=r"^[0-9]+ (milliseconds?|seconds?|minutes?)$",
        description="Micro-batch trigger interval, e.g. '10 seconds'.",
    )
    accept_behind_batch: int | None = Field(
        default=None, alias="acceptBehindBatch", ge=0,
        description="The way out of a CheckpointBehind failure: the batch the refusal named (status.lastCheckpoint.batchId). "
        "With it, the next restart resumes the checkpoint although its latest committed batch is behind that one "
        "(wiped, emptied or moved: output may be repeated or lost); any other value has no effect.",
    )


class RetentionSpec(Model):
    count: int = Field(default=5, ge=1, le=100, description="Savepoints to keep (the latest is never pruned).")
    max_age: str | None = Field(default=None, alias="maxAge", pattern=GO_DURATION_PATTERN, description="Prune savepoints older than this, e.g. 168h.")


class SavepointSpec(Model):
    location: str = Field(pattern=r"^s3a?://.+", max_length=1024, description="S3 prefix under which savepoints are written: s3://bucket/prefix.")
    retention: RetentionSpec = Field(default_factory=RetentionSpec, description="How many savepoints and for how long to keep them.")
    periodic_interval: str | None = Field(
        default=None, alias="periodicInterval", pattern=GO_DURATION_PATTERN, description="Take a savepoint this often while running, e.g. 1h."
    )
    timeout_seconds: int = Field(
        default=600, alias="timeoutSeconds", ge=10, le=86400, description="Give up on a savepoint after this long; the job keeps running."
    )


class RestartPolicy(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.maxDelaySeconds >= self.delaySeconds", "maxDelaySeconds must be >= delaySeconds", ".maxDelaySeconds"),
                cel("self.type != 'FailureRate' || self.failureRateIntervalSeconds >= 1",
                    "FailureRate needs failureRateIntervalSeconds >= 1", ".failureRateIntervalSeconds"),
            ]
        }
    )

    type: RestartPolicyType = Field(default=RestartPolicyType.exponential_backoff, description="How to restart a failed driver.")
    delay_seconds: int = Field(default=10, alias="delaySeconds", ge=0, le=86400, description="Delay before a restart (initial delay for ExponentialBackoff).")
    max_delay_seconds: int = Field(default=300, alias="maxDelaySeconds", ge=0, le=86400, description="Upper bound of the ExponentialBackoff delay.")
    backoff_multiplier: int = Field(default=2, alias="backoffMultiplier", ge=1, le=10, description="ExponentialBackoff growth factor.")
    max_restarts: int = Field(default=10, alias="maxRestarts", ge=0, le=10000,
                              description="FixedDelay and ExponentialBackoff: give up after this many consecutive restarts.")
    max_failures: int = Field(default=3, alias="maxFailures", ge=1, le=MAX_FAILURES,
                              description="FailureRate: failures allowed within the interval; one more exhausts the policy.")
    failure_rate_interval_seconds: int = Field(default=600, alias="failureRateIntervalSeconds", ge=1, le=86400,
                                               description="FailureRate: the sliding window failures are counted in.")
    driver_unreachable_seconds: int = Field(
        default=30, alias="driverUnreachableSeconds", ge=0, le=3600,
        description="A ready driver whose control endpoint has not answered for this long (its node lost, frozen or cut "
        "off) is deleted with grace 0 and replaced from the latest checkpoint, counted as a failure; a driver that is "
        "still alive somewhere is fenced by the checkpoint's epoch. Also the tolerationSeconds of the driver pod's "
        "not-ready and unreachable taints (the node controller's eviction). 0 turns both off (Kubernetes' 300 s "
        "default tolerations, then the grace period, apply).",
    )
    reset_after_seconds: int = Field(
        default=600, alias="resetAfterSeconds", ge=0, le=86400,
        description="FixedDelay and ExponentialBackoff: restartCount (and so the backoff) is reset once a restarted driver "
        "has been ready this long; a job that fails again sooner keeps counting towards maxRestarts.",
    )


class RollbackSpec(Model):
    enabled: bool = Field(default=True, description="Roll back to the last stable spec if an upgraded job does not become ready.")
    readiness_timeout_seconds: int = Field(
        default=300, alias="readinessTimeoutSeconds", ge=10, le=86400,
        description="How long an upgraded job has to complete its first batch before it is rolled back.",
    )


class StandbySpec(Model):
    enabled: bool = Field(
        default=False,
        description="Warm-standby upgrades (upgradeMode savepoint): the new driver starts (pod, JVM, Spark session, "
        "executors, the job checked) while the old one runs, touching no checkpoint, source or output; only when it "
        "is ready is the old one stopped with a savepoint, which the standby restores. A standby that never becomes "
        "ready (image cannot be pulled, crash at start, plan error) is deleted and the change is not applied: the "
        "old driver keeps running. Costs a second driver and its executors for the standby's lifetime.",
    )
    ready_timeout_seconds: int = Field(
        default=300, alias="readyTimeoutSeconds", ge=10, le=86400,
        description="How long the standby has to report ready before it is deleted and the change is not applied.",
    )


class DeletionSpec(Model):
    savepoint_on_delete: bool = Field(default=False, alias="savepointOnDelete", description="Take a final savepoint before deleting the job.")
    timeout_seconds: int = Field(
        default=300, alias="timeoutSeconds", ge=0, le=3600,
        description="Give up on the final savepoint after this long and delete anyway, so a broken job never blocks deletion.",
    )


class StreamJobSpec(Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!has(self.savepointRedeployNonce) || self.savepointRedeployNonce == 0 || has(self.initialSavepointPath)",
                    "savepointRedeployNonce needs spec.initialSavepointPath (the savepoint to redeploy from)",
                    ".savepointRedeployNonce"),
                cel("self.upgradeMode != 'savepoint' || has(self.savepoint)",
                    "upgradeMode savepoint needs spec.savepoint.location", ".upgradeMode"),
                cel("!has(self.savepoint) || !has(self.savepoint.periodicInterval) || has(self.savepoint.location)",
                    "periodic savepoints need spec.savepoint.location", ".savepoint"),
                cel("!has(self.deletion) || !self.deletion.savepointOnDelete || has(self.savepoint)",
                    "savepointOnDelete needs spec.savepoint.location", ".deletion.savepointOnDelete"),
                cel("!(self.checkpoint.location.startsWith('s3a://') || (has(self.savepoint)"
                    " && self.savepoint.location.startsWith('s3'))) || has(self.s3)",
                    "s3a:// or s3:// locations need spec.s3 (`s3: {}` means AWS with the pod's ambient credentials)", ".s3"),
                cel("!has(self.initialSavepointPath) || self.initialSavepointPath.startsWith('s3')"
                    " || self.initialSavepointPath.startsWith('file://')",
                    "initialSavepointPath must be an s3://, s3a:// or file:// URI", ".initialSavepointPath"),
                cel("!has(oldSelf.statePartitions) || self.statePartitions == oldSelf.statePartitions"
                    " || self.upgradeMode == 'savepoint' || self.upgradeMode == 'stateless'",
                    "changing statePartitions needs upgradeMode savepoint (offline repartition) or stateless",
                    ".statePartitions"),
                file_checkpoint_rule(),
                *owned_conf_rules(),
            ]
        }
    )

    image: str = Field(min_length=1, description="Container image of the job runtime (Spark, PySpark and the StreamJob runtime).")
    image_pull_policy: str = Field(default="IfNotPresent", alias="imagePullPolicy", pattern="^(Always|IfNotPresent|Never)$",
                                   description="Image pull policy of the driver and executor pods.")
    service_account_name: str | None = Field(
        default=None, alias="serviceAccountName",
        description="Service account of the driver; it must be allowed to manage pods (its executors) and create "
        "configmaps in the namespace (the Helm chart can create one). Defaults to '<name>-driver', created by the operator.",
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, alias="imagePullSecrets", max_length=16,
        description="Secrets to pull the image with, on the driver and executor pods (with any of the pod templates').",
    )
    pod_template: PodTemplate | None = Field(
        default=None, alias="podTemplate",
        description="Pod template of the driver and the executors (as Flink's podTemplate); driver.podTemplate and "
        "executor.podTemplate are merged over it. Merge rules: docs/reference.md, 'Pod templates'.",
    )
    job: JobDefinition = Field(description="What to run: a Python entrypoint or a declarative pipeline.")
    spark_conf: dict[str, str] = Field(
        default_factory=dict, alias="sparkConf", max_length=MAX_SPARK_CONF,
        description="Extra Spark configuration. Keys the runtime sets itself (" + ", ".join(c.key for c in OWNED_CONFS)
        + ") are refused, and so are keys that carry credentials (Spark's redaction words: secret, password, token, "
        "access key; also private/account/encryption keys and sasl.jaas.config) unless they name a file, a provider "
        "class or a mechanism: credentials "
        "come only from Secrets (spec.s3.credentialsSecret, sasl.secretRef, a volume in spec.podTemplate).",
        json_schema_extra={"x-kubernetes-validations": [secret_conf_rule()]},
    )

    @field_validator("spark_conf")
    @classmethod
    def _no_secrets(cls, conf: dict[str, str]) -> dict[str, str]:
        # the CRD's rule, for specs stored before it (an operator upgrade): a condition, never a pod argument
        for key in sorted(conf):
            if carries_secret(key):
                raise ValueError(f"sparkConf[{key}] {CREDENTIAL_REFUSAL}")
        return conf
    driver: Resources = Field(default_factory=Resources, description="Driver resources.")
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec, description="Executor count and resources.")
    state_partitions: int = Field(
        default=8, alias="statePartitions", ge=1, le=4096,
        description="Number of state partitions (spark.sql.shuffle.partitions), pinned into the checkpoint on first run. "
        "Changing it needs a savepoint and an offline state repartition.",
    )
    checkpoint: CheckpointSpec = Field(description="Checkpoint location and trigger interval.")
    savepoint: SavepointSpec | None = Field(default=None, description="Savepoint location, retention and schedule.")
    s3: S3Settings | None = Field(default=None, description="S3 endpoint and credentials (by Secret reference only).")
    upgrade_mode: UpgradeMode = Field(
        default=UpgradeMode.savepoint, alias="upgradeMode",
        description="How a change is rolled out: savepoint (stop with a savepoint, restore it), last-state "
        "(stop, resume from the latest checkpoint) or stateless (start fresh).",
    )
    state: DesiredState = Field(default=DesiredState.running, description="Desired state: running or suspended (stopped with a savepoint).")
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy, alias="restartPolicy", description="What to do when the driver fails.")
    rollback: RollbackSpec = Field(default_factory=RollbackSpec, description="Automatic rollback of upgrades that do not become ready.")
    standby: StandbySpec = Field(
        default_factory=StandbySpec,
        description="Warm-standby upgrades: start the new driver before stopping the old one (off by default).",
    )
    deletion: DeletionSpec = Field(default_factory=DeletionSpec, description="What happens on delete.")
    initial_savepoint_path: str | None = Field(
        default=None, alias="initialSavepointPath", max_length=1024,
        description="Savepoint to restore from on the first deploy, and on every change of savepointRedeployNonce "
        "(restore a running, failed or suspended job from this savepoint; its current state is discarded). "
        "Changing it alone does nothing on a deployed job.",
    )
    allow_non_restored_state: bool = Field(
        default=False, alias="allowNonRestoredState",
        description="Start even when the checkpoint or the savepoint it restores holds state of stateful operators the "
        "query no longer has (removed without renumbering the kept ones): that state is deleted from the job's own "
        "checkpoint, never from the savepoint. Added, replaced or reordered stateful operators are refused (driver exit 13) "
        "with or without it; start those from fresh state (upgradeMode stateless).",
    )
    savepoint_nonce: int = Field(default=0, alias="savepointNonce", ge=0, description="Change to take a savepoint now without stopping the job.")
    restart_nonce: int = Field(default=0, alias="restartNonce", ge=0, description="Change to restart the driver from the latest checkpoint.")
    savepoint_redeploy_nonce: int = Field(
        default=0, alias="savepointRedeployNonce", ge=0,
        description="Change (together with initialSavepointPath) to redeploy the job from that savepoint: the driver is "
        "stopped without a savepoint and the new one restores initialSavepointPath; used to roll back or recover.",
    )


class SpecError(ValueError):
    """A spec that cannot be parsed; the message names the field and the rule."""


def parse_spec(data: Any) -> StreamJobSpec:
    try:
        return StreamJobSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error("spec", err)) from None
