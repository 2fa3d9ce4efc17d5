"""The StreamJob contract: what the operator, the job runtime and the kubectl plugin agree on.

Installed as ``streamjob_contract``. The operator, the runtime and the CLI import it; it
imports none of them, nor Spark, the Kubernetes client or kopf (an import-linter contract in
pyproject.toml says so). boto3 is imported, lazily, by the storage readers (``s3``) only.

- ``model``: the base of the resource's typed models (``Model``, ``cel``).
- ``jobdef``: the job definition, a StreamJob's ``spec.job``.
- ``kafka_names``: where a Kafka client's SASL credentials and CA file are found (environment variables,
  mount path), shared by the operator that puts them there and the runtime that reads them; no pydantic.
- ``sparkconf``: the Spark confs the runtime owns, refused by the CRD and the runtime alike.
- ``exitcodes``: the runtime's exit codes and what each means to the operator.
- ``lifecycle``: a StreamJob's lifecycle states (``status.state``), what each means, which are terminal.
- ``runtime_status``: the runtime's states and its control endpoint's payloads.
- ``s3``, ``checkpoint``: storage locations and the checkpoint layout, read without Spark.
- ``savepoint_manifest``, ``savepoints``: the savepoint format, and reading, validating and
  deleting savepoints in storage.
- ``httpserve``: the bounded HTTP server of the driver's control endpoint and the operator's
  health and metrics endpoints (one implementation of the bounds both promise).
"""


def __getattr__(name: str) -> str:
    """`__version__`, read from the installed package's metadata when first asked for: the lookup (importlib.metadata
    scanning the installed distributions) is not paid by every process that imports a contract module, such as
    each Python worker of a job's executors."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("streamjob")  # the one place it is set: pyproject.toml [project] version
    except PackageNotFoundError:  # imported from a source tree that is not installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found
