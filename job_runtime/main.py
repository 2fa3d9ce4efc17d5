"""The runtime's command line: `streamjob-runtime run ...` (also `python -m job_runtime.main`).

Called by the driver container (directly, or through spark-submit via
job_runtime/driver.py) with the arguments the operator renders; by tests as a
subprocess. Parses and checks everything that can be checked without Spark,
then hands over to job_runtime.run.runner.Runner and exits with its code
(streamjob_contract.exitcodes). A usage error exits INVALID_JOB (12), not argparse's 2.

Commands:
    run        run a job (see `streamjob-runtime run --help`)
    validate   check a job definition file: exit 0, or 12 with the field named
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn, Sequence

from streamjob_contract.exitcodes import ExitCode
from streamjob_contract.jobdef import JobDefinitionError, dump_job_definition, load_job_definition
from job_runtime.settings import AVAILABLE_NOW, RuntimeSettings, S3Settings, SettingsError, validate

log = logging.getLogger("job_runtime.main")

SPARK_STOP_SECONDS = 30.0
TERMINATION_MESSAGE_LIMIT = 4096  # what Kubernetes keeps of a termination message


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"streamjob-runtime: invalid arguments: {message}", file=sys.stderr)
        sys.exit(ExitCode.INVALID_JOB)


def _conf_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {value!r}")
    return key.strip(), val


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="streamjob-runtime", description="Runs a StreamJob's Spark Structured Streaming query in the driver.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run a job until it ends, fails, or is stopped")
    run.add_argument("--job", required=True, type=Path, help="job definition file (JSON or YAML of the StreamJob's spec.job)")
    run.add_argument("--name", required=True, help="StreamJob name")
    run.add_argument("--namespace", required=True, help="StreamJob namespace")
    run.add_argument("--checkpoint", required=True, help="checkpoint location, s3a://bucket/prefix or file:///path")
    run.add_argument("--state-partitions", required=True, type=int, help="state partitions (pinned into the checkpoint)")
    run.add_argument(
        "--trigger-interval", default="10 seconds",
        help=f"micro-batch interval such as '10 seconds', or {AVAILABLE_NOW!r} to process what is there and end (exit 0)",
    )
    run.add_argument("--restore-from", help="savepoint URI to restore when the checkpoint has no commits yet")
    run.add_argument(
        "--allow-non-restored-state", action="store_true",
        help="start even if the checkpoint or savepoint holds state of stateful operators the query no longer has "
        "(that state is dropped); see job_runtime.checkpoints.nonrestored",
    )
    run.add_argument(
        "--owner-uid",
        help="the StreamJob's metadata.uid: the checkpoint is claimed for it (_streamjob_owner.json) and refused "
        "(exit 13) when another job owns it; see job_runtime.checkpoints.ownership",
    )
    run.add_argument(
        "--expect-committed", type=int, metavar="BATCH",
        help="the latest batch the operator saw committed (status.lastCheckpoint.batchId): a checkpoint whose latest "
        "committed batch is behind it (wiped, another location) is refused with exit 15 instead of starting fresh",
    )
    run.add_argument(
        "--standby", action="store_true",
        help="warm standby: start the Spark session and check the job, report STANDBY on /status, and wait for "
        "POST /release {\"restoreFrom\": savepoint} before claiming the checkpoint, taking the epoch and starting "
        "the query (restoring that savepoint); nothing of the checkpoint, sources or outputs is touched before",
    )
    run.add_argument("--savepoint-location", help="prefix for savepoints requested without a path (s3://...)")
    run.add_argument(
        "--savepoint-timeout-seconds", type=float,
        help="spec.savepoint.timeoutSeconds: incomplete savepoint directories of this job under --savepoint-location "
        "with nothing written for longer are pruned (none are, without it); see job_runtime.checkpoints.hygiene",
    )
    run.add_argument(
        "--hygiene-interval-seconds", type=float, default=300.0,
        help="seconds between two storage hygiene passes (pruning old checkpoint run directories and abandoned "
        "savepoint directories), the first once this driver has committed a batch",
    )
    run.add_argument("--control-address", default="127.0.0.1:0", help="HOST:PORT the control endpoint binds (port 0: any)")
    run.add_argument("--control-address-file", type=Path, help="write the bound HOST:PORT here once listening")
    run.add_argument("--token-file", type=Path, help="file holding the control endpoint's bearer token")
    run.add_argument("--termination-message-file", type=Path, help="write a JSON outcome here on exit (/dev/termination-log)")
    run.add_argument("--s3-endpoint", help="S3 endpoint URL (S3-compatible stores); credentials come only from AWS_* env")
    run.add_argument("--s3-region", default=os.environ.get("AWS_REGION", "us-east-1"), help="S3 region")
    run.add_argument("--s3-path-style", action="store_true", help="path-style S3 addressing")
    run.add_argument("--master", help="Spark master (default: spark-submit's, or local[*])")
    run.add_argument("--conf", action="append", default=[], type=_conf_pair, metavar="KEY=VALUE", help="extra Spark conf")
    run.add_argument("--job-hash", help="hash of the job spec recorded in savepoints (default: of the job file)")

    check = commands.add_parser("validate", help="check a job definition file")
    check.add_argument("--job", required=True, type=Path)
    return parser


def settings_from_args(args: argparse.Namespace, job_hash: str) -> RuntimeSettings:
    return validate(
        RuntimeSettings(
            job_file=args.job,
            name=args.name,
            namespace=args.namespace,
            checkpoint_location=args.checkpoint,
            state_partitions=args.state_partitions,
            trigger_interval=args.trigger_interval.strip(),
            restore_from=args.restore_from,
            allow_non_restored_state=args.allow_non_restored_state,
            savepoint_location=args.savepoint_location,
            control_address=args.control_address or None,
            control_address_file=args.control_address_file,
            token_file=args.token_file,
            termination_message_file=args.termination_message_file,
            s3=S3Settings(endpoint=args.s3_endpoint, region=args.s3_region, path_style=args.s3_path_style),
            master=args.master,
            spark_conf=tuple(args.conf),
            job_hash=args.job_hash or job_hash,
            owner_uid=args.owner_uid,
            expect_committed=args.expect_committed,
            savepoint_timeout_seconds=args.savepoint_timeout_seconds,
            hygiene_interval_seconds=args.hygiene_interval_seconds,
            standby=args.standby,
        )
    )


def configure_logging() -> None:
    logging.basicConfig(
        level=os.environ.get("STREAMJOB_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "botocore", "boto3", "urllib3", "s3transfer"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def write_termination_message(path: Path | None, payload: dict[str, object]) -> None:
    if path is None:
        return
    text = json.dumps(payload)
    if len(text) > TERMINATION_MESSAGE_LIMIT:
        payload = {**payload, "message": str(payload.get("message", ""))[:1500] + "..."}
        text = json.dumps(payload)[:TERMINATION_MESSAGE_LIMIT]
    try:
        path.write_text(text)
    except OSError as err:
        log.warning("could not write termination message path=%s error=%s", path, err.strerror)


def _stop_spark() -> None:
    """Stop the SparkContext if there is one, bounded in time: exiting matters more."""
    try:
        from pyspark import SparkContext
    except ImportError:
        return
    context = SparkContext._active_spark_context
    if context is None:
        return
    stopper = threading.Thread(target=context.stop, name="spark-stop", daemon=True)
    stopper.start()
    stopper.join(SPARK_STOP_SECONDS)


def _invalid(message: str, termination_file: Path | None = None) -> int:
    print(f"streamjob-runtime: {message}", file=sys.stderr, flush=True)
    write_termination_message(
        termination_file,
        {"exitCode": int(ExitCode.INVALID_JOB), "outcome": ExitCode.INVALID_JOB.outcome, "message": message},
    )
    return ExitCode.INVALID_JOB


def run(args: argparse.Namespace) -> int:
    from job_runtime.run.control import ControlServer
    from job_runtime.run.runner import Runner
    from job_runtime.s3client import SharedS3Config
    from job_runtime.query.session import engine_conf

    try:
        job = load_job_definition(args.job)
    except JobDefinitionError as err:
        return _invalid(str(err), args.termination_message_file)
    job_hash = hashlib.sha256(dump_job_definition(job).encode()).hexdigest()[:16]
    try:
        settings = settings_from_args(args, job_hash)
        engine_conf(settings)  # refuses a --conf that fights the runtime before any JVM starts
    except SettingsError as err:
        return _invalid(str(err), args.termination_message_file)

    s3_config = SharedS3Config.from_env(endpoint_url=settings.s3.endpoint, region=settings.s3.region, path_style=settings.s3.path_style)
    runner = Runner(settings, job, s3_config)
    server = None
    if settings.control_address:
        assert settings.token_file is not None
        try:
            server = ControlServer(settings.control_address, settings.token_file, runner)
        except ValueError as err:
            return _invalid(str(err), settings.termination_message_file)
        server.start()
        if settings.control_address_file is not None:
            tmp = settings.control_address_file.with_name(settings.control_address_file.name + ".tmp")
            tmp.write_text(server.address)
            tmp.replace(settings.control_address_file)
    signal.signal(signal.SIGTERM, runner.on_signal)
    signal.signal(signal.SIGINT, runner.on_signal)
    log.info(
        "starting job=%s uid=%s checkpoint=%s statePartitions=%d trigger=%s restoreFrom=%s allowNonRestoredState=%s",
        settings.job_id, settings.owner_uid, settings.checkpoint_location, settings.state_partitions,
        settings.trigger_interval, settings.restore_from, settings.allow_non_restored_state,
    )
    code = runner.run()
    savepoint = runner.final_savepoint.to_json() if runner.final_savepoint else None
    write_termination_message(
        settings.termination_message_file,
        {
            "exitCode": int(code),
            "outcome": ExitCode.of(code).outcome,
            "message": runner.last_error or runner.state.value,
            "savepoint": savepoint,
        },
    )
    log.info("exiting job=%s exitCode=%d outcome=%s", settings.job_id, int(code), ExitCode.of(code).outcome)
    # Later signals must not interrupt the shutdown below.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _stop_spark()
    if server is not None:
        server.close()
    return int(code)


def run_command(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command; returns the exit code (usage errors exit 12 via SystemExit)."""
    configure_logging()
    args = build_parser().parse_args(argv)
    if args.command == "validate":
        try:
            load_job_definition(args.job)
        except JobDefinitionError as err:
            return _invalid(str(err))
        print(f"{args.job}: valid job definition")
        return ExitCode.FINISHED
    return run(args)


def _exit(code: int) -> NoReturn:
    """Exit with exactly `code`: flush, then leave without waiting for py4j's non-daemon threads."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point (`streamjob-runtime`): never returns, always exits with a contract code."""
    try:
        code = run_command(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else ExitCode.INVALID_JOB
    except BaseException as err:  # a crash is never a clean exit
        print(f"streamjob-runtime: crashed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        code = ExitCode.FAILED
    _exit(code)


if __name__ == "__main__":
    main()
