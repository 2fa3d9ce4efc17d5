"""``streamjob-savepoints``: list, inspect, validate, create, restore and delete savepoints,
and find a checkpoint's latest completed batch.

Called by people (debugging, manual restores) and by scripts; a thin argparse layer
over ``job_runtime.savepoints`` and ``streamjob_contract.checkpoint``. S3 settings come from
flags or the usual environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``). Exit codes: 0 done, 3 refused (the
message on stderr says what is wrong and where), 2 bad usage, 1 unexpected failure.

The destructive commands ask first: ``delete`` (and ``restore`` when the target
holds files it would remove) prompt on a terminal, and need ``--yes`` otherwise;
without either they are refused (exit 3) with nothing changed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from streamjob_contract import checkpoint as ckpt
from job_runtime import savepoints as sp
from streamjob_contract.s3 import LocationError, S3Config, Store, parse_location

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="streamjob-savepoints", description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint-url", help="S3 endpoint (default: $AWS_ENDPOINT_URL)")
    parser.add_argument("--region", help="S3 region (default: $AWS_REGION, else us-east-1)")
    parser.add_argument(
        "--path-style", action=argparse.BooleanOptionalAction, default=None,
        help="path-style S3 addressing (default: $STREAMJOB_S3_PATH_STYLE, else on)",
    )
    parser.add_argument("--concurrency", type=int, default=None, help="parallel transfers (default 8)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("list", help="savepoints below a prefix, newest first")
    p.add_argument("prefix")
    p = sub.add_parser("inspect", help="print a savepoint's manifest")
    p.add_argument("uri")
    p = sub.add_parser("validate", help="check manifest, files, sizes, checksums, partitions")
    p.add_argument("uri")
    p.add_argument("--partitions", type=int, help="refuse unless the savepoint has this many state partitions")
    p.add_argument("--no-checksums", action="store_true", help="check presence and sizes only")
    p = sub.add_parser("latest-checkpoint", help="the highest committed batch of a checkpoint location")
    p.add_argument("location")
    p = sub.add_parser("create", help="write a savepoint of a checkpoint's committed batch")
    p.add_argument("checkpoint")
    p.add_argument("uri")
    p.add_argument("--job-name", required=True)
    p.add_argument("--job-namespace", default="default")
    p.add_argument("--job-hash", default="")
    p.add_argument("--spark-version", help="recorded in the manifest (default: the installed pyspark's)")
    p.add_argument("--batch-id", type=int, help="default: the latest completed batch")
    p.add_argument("--partitions", type=int, help="default: the count pinned in the checkpoint")
    p = sub.add_parser("restore", help="materialise a fresh checkpoint from a savepoint")
    p.add_argument("uri")
    p.add_argument("checkpoint")
    p.add_argument("--partitions", type=int, required=True, help="state partitions the job will run with")
    p.add_argument("--allow-non-restored-state", action="store_true")
    p.add_argument(
        "--repartition", action="store_true",
        help="if --partitions differs, start a local Spark session for the offline state repartition",
    )
    p.add_argument("--drop-planned-batch", action="store_true", help="see restore_savepoint: needed to repartition some savepoints")
    p.add_argument("-y", "--yes", action="store_true", help="remove uncommitted files in the target without asking")
    p = sub.add_parser("delete", help="delete a savepoint (manifest first, then the files it lists; needs a manifest)")
    p.add_argument("uri")
    p.add_argument("-y", "--yes", action="store_true", help="delete without asking (needed when not on a terminal)")
    return parser


class NotConfirmedError(Exception):
    """A destructive command was not confirmed: no terminal to ask on and no --yes, or the answer was no."""


def _confirm(args: argparse.Namespace, question: str) -> None:
    """Returns when confirmed (``--yes`` or 'y' on a terminal); raises ``NotConfirmedError`` otherwise."""
    if args.yes:
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


def _s3_config(args: argparse.Namespace) -> S3Config:
    return S3Config.from_env(
        endpoint_url=args.endpoint_url, region=args.region, path_style=args.path_style, max_concurrency=args.concurrency
    )


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


def _run(args: argparse.Namespace) -> Any:
    """Runs one command; returns (json-able value, text)."""
    s3 = _s3_config(args)
    if args.command == "list":
        found = sp.list_savepoints(args.prefix, s3_config=s3)
        rows = [{**asdict(s), "created_at": s.created_at.isoformat()} for s in found]
        text = "\n".join(
            f"{s.created_at.isoformat()}  batch={s.batch_id:<6} {s.job_namespace}/{s.job_name}  {s.total_bytes}B  {s.uri}"
            for s in found
        )
        return rows, text or "(no savepoints)"
    if args.command == "inspect":
        m = sp.inspect_savepoint(args.uri, s3_config=s3)
        return json.loads(m.model_dump_json()), _manifest_text(m, args.uri)
    if args.command == "validate":
        m = sp.validate_savepoint(
            args.uri, args.partitions, verify_checksums=not args.no_checksums, s3_config=s3
        )
        return {"uri": args.uri, "valid": True, "batch_id": m.batch_id, "files": len(m.files)}, (
            f"{args.uri}: valid savepoint of batch {m.batch_id} ({len(m.files)} files, {m.total_bytes} bytes)"
        )
    if args.command == "latest-checkpoint":
        batch = ckpt.latest_completed_batch(args.location, s3=s3)
        return {"location": args.location, "batch_id": batch}, "none" if batch is None else str(batch)
    if args.command == "create":
        m = sp.write_savepoint(
            args.checkpoint, args.uri, job_name=args.job_name, job_namespace=args.job_namespace,
            job_hash=args.job_hash, spark_version=args.spark_version or _spark_version(),
            state_partitions=args.partitions, batch_id=args.batch_id, s3_config=s3,
        )
        return json.loads(m.model_dump_json()), _manifest_text(m, args.uri)
    if args.command == "restore":
        leftovers = _restore_leftovers(args.checkpoint, s3)
        if leftovers:
            _confirm(args, f"restore {args.uri} into {args.checkpoint}, removing the {leftovers} file(s) there that hold no committed batch?")
        spark = None
        if args.repartition:
            current = sp.inspect_savepoint(args.uri, s3_config=s3)
            if current.state_partitions != args.partitions:
                spark = _local_spark()
        m = sp.restore_savepoint(
            args.uri, args.checkpoint, expected_state_partitions=args.partitions,
            allow_non_restored_state=args.allow_non_restored_state, spark=spark,
            drop_planned_batch=args.drop_planned_batch, s3_config=s3,
        )
        return {"uri": args.uri, "checkpoint": args.checkpoint, "batch_id": m.batch_id}, (
            f"restored {args.uri} (batch {m.batch_id}) to {args.checkpoint}"
        )
    if args.command == "delete":
        manifest = sp.inspect_savepoint(args.uri, s3_config=s3)  # refused before asking when there is no savepoint
        _confirm(args, f"delete savepoint {args.uri} ({len(manifest.files) + 1} files, batch {manifest.batch_id})?")
        count = sp.delete_savepoint(args.uri, s3_config=s3)
        return {"uri": args.uri, "deleted_files": count}, f"deleted {args.uri} ({count} files)"
    raise AssertionError(f"unhandled command {args.command}")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        value, text = _run(args)
    except (sp.SavepointError, ckpt.CheckpointError, LocationError, NotConfirmedError) as exc:
        print(f"refused: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": str(exc), "kind": type(exc).__name__}))
        return EXIT_REFUSED
    except Exception as exc:  # a CLI reports every failure as a message, not a traceback
        logging.getLogger(__name__).debug("Failed command=%s", args.command, exc_info=True)
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(value, indent=2, default=str) if args.json else text)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
