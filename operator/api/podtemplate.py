"""The pod template of a StreamJob: a Kubernetes Pod template the operator merges with its own pod.

Part of the spec (api.spec) and so of the CRD. Only what the operator or a
CEL rule reads is typed (container names and volume mounts, volume names and
kinds, imagePullSecrets, the fields the operator owns); everything else in
`spec` and in each container is a standard Pod field kept as written
(`x-kubernetes-preserve-unknown-fields`) and checked by the API server when
the pod is created. The merge itself is k8s.pods.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from streamjob_contract.model import Model, cel

# The container of a template that is merged into the operator's own container
# (the driver's `driver`, the executors' `executor`), as Flink's flink-main-container.
MAIN_CONTAINER = "main"
OPERATOR_CONTAINERS = ("driver", "executor")
# volumes the operator adds to the driver pod are named with this prefix
OPERATOR_VOLUME_PREFIX = "streamjob-"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


# Rendered into docs/reference.md ('Pod templates') by api.reference; k8s.pods implements them.
MERGE_RULES = f"""\
`spec.podTemplate` is a Pod template (`metadata` with `labels` and `annotations`, and a Pod
`spec`) for the driver and the executors, as Flink's `podTemplate`; `spec.driver.podTemplate`
and `spec.executor.podTemplate` apply to one role. The driver pod is built by the operator;
the executor pods are built by Spark in the driver from a pod template file the operator
writes into the job's ConfigMap (`spark.kubernetes.executor.podTemplateFile`), so the same
rules reach both.

1. **Role over common.** The role's template is merged over `spec.podTemplate`: maps merge
   key by key, the role's value winning (`nodeSelector`, `securityContext`, labels...); lists
   of named objects merge by `name` (`containers`, `volumes`, `volumeMounts`, `env`,
   `imagePullSecrets`); any other list is replaced by the role's (`tolerations`, `args`...).
2. **The main container.** The template's container named `{MAIN_CONTAINER}` is merged into
   the operator's own container (`driver` on the driver pod, `executor` on executor pods),
   which is always the first (and the pod's `kubectl.kubernetes.io/default-container`). The
   operator (or Spark) sets its name, image, pull policy, command, args, cpu and memory,
   and termination message; its env variables and ports win by name (and port number); the
   template's other env variables, envFrom, ports, volumeMounts, resources (for example
   `ephemeral-storage`), probes and securityContext are kept. Any other container is a
   sidecar, kept as written after the main one.
3. **Pod fields.** Everything else in the template's `spec` is kept: `nodeSelector`,
   `tolerations`, `affinity`, `topologySpreadConstraints`, `priorityClassName`, `volumes`
   (after the operator's), `initContainers`, `securityContext`, `hostAliases`... The
   operator's `restartPolicy`, `serviceAccountName` (`spec.serviceAccountName`) and
   `terminationGracePeriodSeconds` are refused in a template; containers named `driver` or
   `executor` and volumes named `{OPERATOR_VOLUME_PREFIX}*` are refused as well.
4. **Labels and annotations.** The template's, then the operator's and Spark's over them
   (`streamjob.io/*`, `spark-role`...).
5. **Pull secrets.** `spec.imagePullSecrets`, then the template's `imagePullSecrets`
   (duplicates dropped), on the driver and the executors.
6. **Security defaults.** Pod `securityContext`: `runAsNonRoot: true`, `runAsUser`,
   `runAsGroup` and `fsGroup` 185 (the image's user), `seccompProfile: RuntimeDefault`.
   Every container, sidecars and init containers included: `allowPrivilegeEscalation:
   false`, `capabilities: {{drop: [ALL]}}`. The template's values are merged over these
   key by key, so a template can change them (another user id, a Localhost seccomp
   profile); a template that relaxes them below `restricted` is refused by such a
   namespace's admission, not by the operator.
7. **file:// checkpoints.** `spec.checkpoint.location` `file://...` is refused at apply
   time unless `spec.podTemplate` (the template of both roles: executors write state files
   into the checkpoint too) mounts, in its `{MAIN_CONTAINER}` container, a volume that is not
   an `emptyDir` at that path or a parent of it. A file:// checkpoint on the pod's own disk
   would be lost when the driver pod is replaced (every restart and upgrade).

Standard Pod fields are not typed in this schema beyond what the rules above read; the API
server checks them when the pod is created. A driver pod it refuses is reported in
`status.reconcileError`, the `Degraded` condition and an event (reason `AdmissionDenied` for
Pod Security or another admission, `Invalid` for a malformed field), with the API server's
message; an executor pod it refuses is in the driver's log (Spark retries it).
"""


def _keep_unknown(schema: dict[str, Any], cls: type | None = None) -> None:
    """Structural-schema form of pydantic's extra="allow": declared fields typed, the rest kept as written."""
    schema.pop("additionalProperties", None)
    schema["x-kubernetes-preserve-unknown-fields"] = True


class Open(BaseModel):
    """A Kubernetes object the operator reads a few fields of and passes on whole."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True, json_schema_extra=_keep_unknown)


class LocalObjectReference(Model):
    name: str = Field(min_length=1, max_length=253, description="Name of a Secret in the StreamJob's namespace.")


class VolumeMount(Open):
    name: str = Field(min_length=1, max_length=63, description="Name of a volume of the pod template.")
    mount_path: str = Field(alias="mountPath", min_length=1, max_length=1024, pattern=r"^/",
                            description="Absolute path in the container.")


class TemplateContainer(Open):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN,
                      description=f"'{MAIN_CONTAINER}' adds to the operator's container; any other name is a sidecar.")
    volume_mounts: list[VolumeMount] | None = Field(default=None, alias="volumeMounts", max_length=64,
                                                    description="Volume mounts (kept on the main container too).")


class VolumeSource(Open):
    """Any volume source; only its presence is read."""


class Volume(Open):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN, description="Volume name.")
    empty_dir: VolumeSource | None = Field(default=None, alias="emptyDir",
                                           description="A per-pod directory: gone when the pod is replaced.")


def _pod_spec_schema(schema: dict[str, Any], cls: type | None = None) -> None:
    _keep_unknown(schema)
    schema["x-kubernetes-validations"] = [
        cel("!has(self.restartPolicy)", "restartPolicy is the operator's (Never: it restarts the driver per "
            "spec.restartPolicy)", ".restartPolicy"),
        cel("!has(self.serviceAccountName)", "set the driver's service account with spec.serviceAccountName",
            ".serviceAccountName"),
        cel("!has(self.terminationGracePeriodSeconds)", "terminationGracePeriodSeconds is the operator's "
            "(it bounds the driver's clean stop)", ".terminationGracePeriodSeconds"),
        cel("!has(self.containers) || self.containers.all(c, c.name != 'driver' && c.name != 'executor')",
            f"container names driver and executor are the operator's; name a container '{MAIN_CONTAINER}' "
            "to add to the driver's or executors' container", ".containers"),
        cel(f"!has(self.volumes) || self.volumes.all(v, !v.name.startsWith('{OPERATOR_VOLUME_PREFIX}'))",
            f"volume names starting with '{OPERATOR_VOLUME_PREFIX}' are the operator's", ".volumes"),
    ]


class TemplatePodSpec(Open):
    model_config = ConfigDict(json_schema_extra=_pod_spec_schema)

    containers: list[TemplateContainer] | None = Field(
        default=None, max_length=16,
        description=f"The container named '{MAIN_CONTAINER}' is merged into the operator's container; the others run "
        "beside it (sidecars).",
    )
    volumes: list[Volume] | None = Field(default=None, max_length=64, description="Volumes added to the pod.")
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None, alias="imagePullSecrets", max_length=16, description="Added to spec.imagePullSecrets.")
    restart_policy: str | None = Field(default=None, alias="restartPolicy", description="Refused: the operator's.")
    service_account_name: str | None = Field(default=None, alias="serviceAccountName", description="Refused: use spec.serviceAccountName.")
    termination_grace_period_seconds: int | None = Field(
        default=None, alias="terminationGracePeriodSeconds", description="Refused: the operator's.")


class TemplateMetadata(Model):
    labels: dict[str, str] | None = Field(default=None, description="Labels added to the pods; the operator's win.")
    annotations: dict[str, str] | None = Field(default=None, description="Annotations added to the pods; the operator's win.")


class PodTemplate(Model):
    metadata: TemplateMetadata | None = Field(default=None, description="Labels and annotations of the pods.")
    spec: TemplatePodSpec | None = Field(
        default=None,
        description="A Pod spec: nodeSelector, tolerations, affinity, securityContext, volumes, sidecars, "
        "imagePullSecrets... Merged with the operator's pod as docs/reference.md ('Pod templates') states.",
    )


def dump(template: PodTemplate | None) -> dict[str, Any]:
    """The template as the plain manifest fragment the user wrote (camelCase, unset fields left out)."""
    return template.model_dump(mode="json", by_alias=True, exclude_none=True) if template is not None else {}
