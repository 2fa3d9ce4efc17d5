"""``streamjob-savepoints``: list, inspect, validate, create, restore and delete savepoints,
and find a checkpoint's latest completed batch.

Called by people (debugging, manual restores, migrating a checkpoint) and by scripts;
a thin click layer (the library of the kubectl plugin, ``streamjob_cli``) over
``job_runtime.savepoints`` and ``streamjob_contract.checkpoint``. It works offline on
the store; the plugin's ``inspect`` and ``history --sizes`` read the same manifests
with the same validator (``streamjob_contract.savepoints``). S3 settings come from
flags or the usual environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``). Exit codes: 0 done, 3 refused (the
message on stderr says what is wrong and where), 2 bad usage, 1 unexpected failure.

The destructive commands ask first: ``delete`` (and ``restore`` when the target
holds files it would remove) prompt on a terminal, and need ``--yes`` otherwise;
without either they are refused (exit 3) with nothing changed.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import click

from job_runtime import savepoints as sp
from streamjob_contract import checkpoint as ckpt
from streamjob_contract.s3 import LocationError, S3Config, Store, parse_location

PROG = "streamjob-savepoints"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3

# what a command returns: a JSON-able value (--json) and the text for people
Result = tuple[Any, str]


@dataclass(frozen=True)
class Options:
    """The group's options, read by every command."""

    endpoint_url: str | None
    region: str | None
    path_style: bool | None
    concurrency: int | None
    json: bool

    def s3(self) -> S3Config:
        return S3Config.from_env(
            endpoint_url=self.endpoint_url, region=self.region, path_style=self.path_style, max_concurrency=self.concurrency
        )


class NotConfirmedError(Exception):
    """A destructive command was not confirmed: no terminal to ask on and no --yes, or the answer was no."""


def _confirm(yes: bool, question: str) -> None:
    """Returns when confirmed (``--yes`` or 'y' on a terminal); raises ``NotConfirmedError`` otherwise."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise NotConfirmedError(f"{question}: not confirmed: pass --yes to confirm when not on a terminal; nothing was changed")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise NotConfirmedError(f"{question}: not confirmed; nothing was changed")


def _restore_leftovers(checkpoint: str, s3: S3Config) -> int:
    """How many files ``restore`` would remove from the target (see restore_savepoint)."""
    loc = parse_location(checkpoint)
    store = Store(loc, s3.client() if loc.scheme == "s3" else None)
    paths = [f.path for f in store.list()]
    if ckpt.committed_batches(paths) and sp.RESTORE_MARKER not in paths:
        return 0  # restore_savepoint refuses this target without touching it
    return sum(1 for p in paths if not p.startswith(ckpt.RUNTIME_FILES_PREFIX))


def _spark_version() -> str:
    try:
        import pyspark

        return str(pyspark.__version__)
    except ImportError:
        return "unknown"


def _local_spark() -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[1]").appName("streamjob-savepoints-repartition")
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .getOrCreate()
    )


def _manifest_text(m: sp.Manifest, uri: str) -> str:
    lines = [
        f"savepoint:        {uri}",
        f"job:              {m.job.namespace}/{m.job.name} (hash {m.job.hash or '-'})",
        f"batch:            {m.batch_id}" + (f" (planned {m.planned_batch_id})" if m.planned_batch_id is not None else ""),
        f"watermark_ms:     {m.watermark_ms}",
        f"state partitions: {m.state_partitions} ({m.state_store_provider or 'unknown provider'})",
        f"state operators:  {m.state_operators}",
        f"spark:            {m.spark_version}",
        f"created:          {m.created_at.isoformat()}",
        f"source:           {m.source_checkpoint}",
        f"files:            {len(m.files)} ({m.total_bytes} bytes)",
    ]
    return "\n".join(lines)


@click.group(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL)")
@click.option("--region", help="S3 region (default: $AWS_REGION, else us-east-1)")
@click.option("--path-style/--no-path-style", default=None, help="path-style S3 addressing (default: $STREAMJOB_S3_PATH_STYLE, else on)")
@click.option("--concurrency", type=int, default=None, help="parallel transfers (default 8)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.option("-v", "--verbose", is_flag=True, help="log progress to stderr")
@click.pass_context
def cli(
    ctx: click.Context, endpoint_url: str | None, region: str | None, path_style: bool | None, concurrency: int | None,
    as_json: bool, verbose: bool,
) -> None:
    """List, inspect, validate, create, restore and delete savepoints, and find a checkpoint's latest completed batch."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    ctx.obj = Options(endpoint_url, region, path_style, concurrency, as_json)


def _outcome(command: Callable[..., Result]) -> Callable[..., int]:
    """Runs a command and prints its result; refusals exit 3, anything else unexpected 1, each as one line on stderr."""

    @functools.wraps(command)
    def run(**kwargs: Any) -> int:
        options = click.get_current_context().find_object(Options)
        assert options is not None
        try:
            value, text = command(options.s3(), **kwargs)
        except (sp.SavepointError, ckpt.CheckpointError, LocationError, NotConfirmedError) as exc:
            print(f"refused: {exc}", file=sys.stderr)
            if options.json:
                print(json.dumps({"error": str(exc), "kind": type(exc).__name__}))
            return EXIT_REFUSED
        except Exception as exc:  # a CLI reports every failure as a message, not a traceback
            logging.getLogger(__name__).debug("Failed command=%s", command.__name__, exc_info=True)
            print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return EXIT_FAILED
        print(json.dumps(value, indent=2, default=str) if options.json else text)
        return EXIT_OK

    return run


@cli.command("list")
@click.argument("prefix")
@_outcome
def list_(s3: S3Config, prefix: str) -> Result:
    """Savepoints below a prefix, newest first."""
    found = sp.list_savepoints(prefix, s3_config=s3)
    rows = [{**asdict(s), "created_at": s.created_at.isoformat()} for s in found]
    text = "\n".join(
        f"{s.created_at.isoformat()}  batch={s.batch_id:<6} {s.job_namespace}/{s.job_name}  {s.total_bytes}B  {s.uri}"
        for s in found
    )
    return rows, text or "(no savepoints)"


@cli.command()
@click.argument("uri")
@_outcome
def inspect(s3: S3Config, uri: str) -> Result:
    """Print a savepoint's manifest."""
    m = sp.inspect_savepoint(uri, s3_config=s3)
    return json.loads(m.model_dump_json()), _manifest_text(m, uri)


@cli.command()
@click.argument("uri")
@click.option("--partitions", type=int, help="refuse unless the savepoint has this many state partitions")
@click.option("--no-checksums", is_flag=True, help="check presence and sizes only")
@_outcome
def validate(s3: S3Config, uri: str, partitions: int | None, no_checksums: bool) -> Result:
    """Check manifest, files, sizes, checksums, partitions."""
    m = sp.validate_savepoint(uri, partitions, verify_checksums=not no_checksums, s3_config=s3)
    return {"uri": uri, "valid": True, "batch_id": m.batch_id, "files": len(m.files)}, (
        f"{uri}: valid savepoint of batch {m.batch_id} ({len(m.files)} files, {m.total_bytes} bytes)"
    )


@cli.command("latest-checkpoint")
@click.argument("location")
@_outcome
def latest_checkpoint(s3: S3Config, location: str) -> Result:
    """The highest committed batch of a checkpoint location."""
    batch = ckpt.latest_completed_batch(location, s3=s3)
    return {"location": location, "batch_id": batch}, "none" if batch is None else str(batch)


@cli.command()
@click.argument("checkpoint")
@click.argument("uri")
@click.option("--job-name", required=True)
@click.option("--job-namespace", default="default", show_default=True)
@click.option("--job-hash", default="")
@click.option("--spark-version", help="recorded in the manifest (default: the installed pyspark's)")
@click.option("--batch-id", type=int, help="default: the latest completed batch")
@click.option("--partitions", type=int, help="default: the count pinned in the checkpoint")
@_outcome
def create(
    s3: S3Config, checkpoint: str, uri: str, job_name: str, job_namespace: str, job_hash: str, spark_version: str | None,
    batch_id: int | None, partitions: int | None,
) -> Result:
    """Write a savepoint of a checkpoint's committed batch."""
    m = sp.write_savepoint(
        checkpoint, uri, job_name=job_name, job_namespace=job_namespace, job_hash=job_hash,
        spark_version=spark_version or _spark_version(), state_partitions=partitions, batch_id=batch_id, s3_config=s3,
    )
    return json.loads(m.model_dump_json()), _manifest_text(m, uri)


@cli.command()
@click.argument("uri")
@click.argument("checkpoint")
@click.option("--partitions", type=int, required=True, help="state partitions the job will run with")
@click.option("--allow-non-restored-state", is_flag=True)
@click.option(
    "--repartition", is_flag=True, help="if --partitions differs, start a local Spark session for the offline state repartition"
)
@click.option("--drop-planned-batch", is_flag=True, help="see restore_savepoint: needed to repartition some savepoints")
@click.option("-y", "--yes", is_flag=True, help="remove uncommitted files in the target without asking")
@_outcome
def restore(
    s3: S3Config, uri: str, checkpoint: str, partitions: int, allow_non_restored_state: bool, repartition: bool,
    drop_planned_batch: bool, yes: bool,
) -> Result:
    """Materialise a fresh checkpoint from a savepoint."""
    leftovers = _restore_leftovers(checkpoint, s3)
    if leftovers:
        _confirm(yes, f"restore {uri} into {checkpoint}, removing the {leftovers} file(s) there that hold no committed batch?")
    spark = None
    if repartition:
        current = sp.inspect_savepoint(uri, s3_config=s3)
        if current.state_partitions != partitions:
            spark = _local_spark()
    m = sp.restore_savepoint(
        uri, checkpoint, expected_state_partitions=partitions, allow_non_restored_state=allow_non_restored_state,
        spark=spark, drop_planned_batch=drop_planned_batch, s3_config=s3,
    )
    return {"uri": uri, "checkpoint": checkpoint, "batch_id": m.batch_id}, f"restored {uri} (batch {m.batch_id}) to {checkpoint}"


@cli.command()
@click.argument("uri")
@click.option("-y", "--yes", is_flag=True, help="delete without asking (needed when not on a terminal)")
@_outcome
def delete(s3: S3Config, uri: str, yes: bool) -> Result:
    """Delete a savepoint (manifest first, then the files it lists; needs a manifest)."""
    manifest = sp.inspect_savepoint(uri, s3_config=s3)  # refused before asking when there is no savepoint
    _confirm(yes, f"delete savepoint {uri} ({len(manifest.files) + 1} files, batch {manifest.batch_id})?")
    count = sp.delete_savepoint(uri, s3_config=s3)
    return {"uri": uri, "deleted_files": count}, f"deleted {uri} ({count} files)"


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: the exit code (a usage error is click's, 2, with the usage on stderr)."""
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        print("Aborted!", file=sys.stderr)
        return EXIT_FAILED
    return code if isinstance(code, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
