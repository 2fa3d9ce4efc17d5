"""The `streamjob-operator` command: parse flags, serve health, win the leader Lease, run kopf with our handlers.

Called as the console script (pyproject ``[project.scripts]``) in the
operator's Deployment, and as a subprocess by the end-to-end tests. The
health endpoints come first, so a standby answers its probes while it waits;
kopf starts only on the leader (``standalone``: exclusivity comes from our
Lease, not kopf peering, whose replicas of equal priority all freeze).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import kopf

from streamjob_operator.k8s.resources import RuntimeLayout
from streamjob_operator.progress import DEFAULT_POLLS_PER_SECOND, DEFAULT_WRITES_PER_SECOND, Progress
from streamjob_operator.slots import DEFAULT_LIMIT, UpgradeSlots

if TYPE_CHECKING:
    from streamjob_operator.k8s.lease import LeaderElector

log = logging.getLogger("streamjob_operator")
KOPF_ANSWER_SECONDS = 3  # the leader is live while kopf's event loop answers within this (the chart's probe timeout is above)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamjob-operator",
        description="Runs StreamJobs: Spark Structured Streaming jobs with savepoints, upgrades and restarts.",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                       help="watch this namespace (repeatable; kopf globs like 'team-*' work)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)")
    parser.add_argument("--liveness", metavar="URL", default=os.environ.get("STREAMJOB_LIVENESS"),
                        help="serve a liveness probe at this URL, e.g. http://0.0.0.0:8080/healthz, and readiness at /readyz "
                             "on the same port (standby replicas too)")
    parser.add_argument("--metrics-address", metavar="HOST:PORT", default=os.environ.get("STREAMJOB_METRICS_ADDRESS"),
                        help="serve Prometheus metrics on http://HOST:PORT/metrics, e.g. 0.0.0.0:9090 (off when unset)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each pass")
    parser.add_argument("--debug", action="store_true", help="log kopf's internals too")
    parser.add_argument("--log-level", choices=["debug", "verbose", "info"], default=None,
                        help="one flag for Helm values: debug = --debug, verbose = -v, info = neither")
    parser.add_argument("--no-leader-election", dest="leader_election", action="store_false",
                        help="do not take the leader Lease (a single replica, e.g. during development)")
    parser.add_argument("--lease-name", default="streamjob-operator", help="name of the leader Lease")
    parser.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"),
                        help="namespace of the leader Lease (default $POD_NAMESPACE or default)")
    parser.add_argument("--lease-seconds", type=int, default=int(os.environ.get("STREAMJOB_LEASE_SECONDS", "15")),
                        help="leader Lease duration: a standby takes over this long after it last saw the Lease renewed")
    parser.add_argument("--renew-deadline-seconds", type=float, default=None,
                        help="the leader steps down (exits) when no renewal was accepted for this long "
                             "(default 2/3 of --lease-seconds; must be below it)")
    parser.add_argument("--retry-period-seconds", type=float, default=None,
                        help="between two tries to take or renew the Lease (default 2/15 of --lease-seconds)")
    parser.add_argument("--runtime-command", default=os.environ.get("STREAMJOB_RUNTIME_COMMAND", RuntimeLayout.runtime_command),
                        help="the job runtime's command inside the runtime image (the driver container's main process)")
    parser.add_argument("--control-port", type=int, default=RuntimeLayout.control_port, help="driver control endpoint port")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("STREAMJOB_WORKERS", "16")),
                        help="reconcile passes of different jobs that run at once (passes of one job are serialised)")
    parser.add_argument("--max-concurrent-upgrades", type=int, metavar="N",
                        default=int(os.environ.get("STREAMJOB_MAX_CONCURRENT_UPGRADES", str(DEFAULT_LIMIT))),
                        help="jobs that run an upgrade or a rollback at once; the other changed jobs keep running their "
                        "current spec and wait (Progressing: UpgradeQueued). 0: no bound")
    parser.add_argument("--driver-polls-per-second", type=float, metavar="N",
                        default=float(os.environ.get("STREAMJOB_DRIVER_POLLS_PER_SECOND", str(DEFAULT_POLLS_PER_SECOND))),
                        help="budget of steady /status polls of Ready drivers, over all jobs: each is polled every 10 s up to "
                        "10 x N jobs, then every jobs/N s (events and operations are not held to it)")
    parser.add_argument("--progress-writes-per-second", type=float, metavar="N",
                        default=float(os.environ.get("STREAMJOB_PROGRESS_WRITES_PER_SECOND", str(DEFAULT_WRITES_PER_SECOND))),
                        help="budget of status writes that carry only a Ready job's progress (batch, rates, lastCheckpoint), "
                        "over all jobs: at most every 10 s per job up to 10 x N jobs, then every jobs/N s; any other change "
                        "is written at once")
    parser.add_argument("--idle-poll-seconds", type=float, default=float(os.environ.get("STREAMJOB_IDLE_POLL_SECONDS", "60")),
                        help="between timer passes of a settled job with no driver (suspended, failed, finished); "
                        "a spec change or a driver pod event still runs a pass at once")
    parser.add_argument("--no-read-cache", dest="read_cache", action="store_false",
                        help="read each job and its driver pods with a request every pass instead of from the watches")
    parser.add_argument("--no-state-repartition", dest="repartition", action="store_false",
                        help="refuse statePartitions changes up front (runtime images whose Spark cannot repartition state)")
    s3 = parser.add_argument_group("S3 (the operator's own reads of savepoint manifests and checkpoints, and retention)")
    s3.add_argument("--s3-connect-timeout-seconds", type=float, default=3.0, metavar="S",
                    help="connect timeout of each S3 request (default 3)")
    s3.add_argument("--s3-read-timeout-seconds", type=float, default=10.0, metavar="S",
                    help="read timeout of each S3 request (default 10)")
    s3.add_argument("--s3-max-attempts", type=int, default=2, metavar="N",
                    help="attempts per S3 call, the first included (default 2)")
    s3.add_argument("--s3-unresponsive-seconds", type=float, default=60.0, metavar="S",
                    help="an endpoint that timed out is not called again for this long (default 60)")
    s3.add_argument("--s3-ambient-credentials", action="store_true",
                    help="sign S3 requests of jobs without spec.s3.credentialsSecret with the operator's own identity "
                         "(environment, web identity, instance profile); off: such requests are unsigned")
    return parser


def configure_logging(verbose: bool, debug: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not debug:
        for noisy in ("kopf", "kubernetes", "urllib3", "botocore", "boto3", "s3transfer", "aiohttp"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose and not debug:
        logging.getLogger("streamjob_operator.reconcile.observe").setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.log_level == "debug":
        args.debug = True
    elif args.log_level == "verbose":
        args.verbose = True
    configure_logging(args.verbose, args.debug)

    from streamjob_operator import handlers, metrics, passes  # handlers registers the kopf handlers
    from streamjob_operator.health import HealthError, HealthServer
    from streamjob_operator.k8s.clients import S3Limits, fence_kopf_writes, load_api_client
    from streamjob_operator.k8s.lease import LeaderElector
    from streamjob_operator.k8s.lease_rules import TimingError, Timings

    try:
        timings = Timings.derive(args.lease_seconds, args.renew_deadline_seconds, args.retry_period_seconds)
    except TimingError as err:
        parser.error(str(err))
    handlers.SETTINGS.layout = RuntimeLayout(runtime_command=args.runtime_command, control_port=args.control_port)
    handlers.SETTINGS.repartition_supported = args.repartition
    for flag, value in (("--s3-connect-timeout-seconds", args.s3_connect_timeout_seconds),
                        ("--s3-read-timeout-seconds", args.s3_read_timeout_seconds),
                        ("--s3-max-attempts", args.s3_max_attempts), ("--s3-unresponsive-seconds", args.s3_unresponsive_seconds)):
        if value <= 0:
            parser.error(f"{flag}: must be > 0, got {value}")
    handlers.SETTINGS.s3_limits = S3Limits(
        connect_timeout_seconds=args.s3_connect_timeout_seconds,
        read_timeout_seconds=args.s3_read_timeout_seconds,
        max_attempts=args.s3_max_attempts,
        unresponsive_seconds=args.s3_unresponsive_seconds,
        ambient_credentials=args.s3_ambient_credentials,
    )
    if args.workers < 1:
        parser.error("--workers: must be >= 1")
    if args.idle_poll_seconds < passes.TIMER_SECONDS:
        parser.error(f"--idle-poll-seconds: must be >= {passes.TIMER_SECONDS:g} (the timer's interval)")
    if args.max_concurrent_upgrades < 0:
        parser.error("--max-concurrent-upgrades: must be >= 0 (0: no bound)")
    for flag, budget in (("--driver-polls-per-second", args.driver_polls_per_second),
                         ("--progress-writes-per-second", args.progress_writes_per_second)):
        if budget <= 0:
            parser.error(f"{flag}: must be > 0, got {budget:g}")
    handlers.SETTINGS.workers = args.workers
    handlers.SETTINGS.progress = Progress(args.driver_polls_per_second, args.progress_writes_per_second)
    handlers.SETTINGS.upgrade_slots = UpgradeSlots(args.max_concurrent_upgrades)
    handlers.SETTINGS.idle_seconds = args.idle_poll_seconds
    handlers.SETTINGS.read_cache = args.read_cache

    if args.metrics_address:
        try:
            metrics.serve(args.metrics_address)
        except ValueError as err:
            parser.error(str(err))
        except OSError as err:  # e.g. the port is taken: say which flag and address
            parser.error(f"--metrics-address: cannot listen on {args.metrics_address}: {err}")
        log.info("Serving metrics address=http://%s/metrics", args.metrics_address)
    slots, progress = handlers.SETTINGS.upgrade_slots, handlers.SETTINGS.progress
    metrics.watch_operator(handlers.PASSES.waiting, slots.in_use, slots.queued, progress.poll_seconds, progress.progress_seconds)
    metrics.LEADER.set(0)
    loop = asyncio.new_event_loop()
    elector = None
    if args.leader_election:
        identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        elector = LeaderElector(load_api_client(), args.lease_namespace, args.lease_name, identity, timings)
    if args.liveness:
        try:
            health = HealthServer(args.liveness, live=lambda: _live(elector, loop),
                                  ready=lambda: elector is None or elector.leading() or elector.connected())
        except HealthError as err:
            parser.error(str(err))
        except OSError as err:  # e.g. the port is taken: say which flag and address
            parser.error(f"--liveness: cannot listen on {args.liveness}: {err}")
        health.start()
        log.info("Serving health liveness=%s%s readiness=%s/readyz", health.address, health.path, health.address)
    if elector is not None:
        log.info("Started leader election lease=%s/%s identity=%s leaseSeconds=%g renewDeadlineSeconds=%g retryPeriodSeconds=%g",
                 args.lease_namespace, args.lease_name, elector.identity, timings.lease_seconds, timings.renew_deadline,
                 timings.retry_period)
        elector.start()
        if not elector.wait_until_leading():
            return 1
        handlers.SETTINGS.fence = elector.ensure_leading
        fence_kopf_writes(elector.ensure_leading)
        handlers.SETTINGS.write_timeout = timings.write_timeout()
    metrics.LEADER.set(1)  # losing the Lease ends the process (lease.py): no path back to 0 while serving
    namespaces = args.namespace
    log.info("Started operator namespaces=%s leaderElection=%s driverScript=%s",
             ",".join(namespaces) or "*", args.leader_election, args.runtime_command)
    try:
        kopf.run(loop=loop, standalone=True, namespaces=namespaces, clusterwide=not namespaces)
    finally:
        metrics.LEADER.set(0)
        if elector is not None:  # the fence refuses writes from here on; passes still running end before the handover
            elector.release(idle=lambda: handlers.wait_idle(timings.renew_deadline))
    return 0


def _live(elector: LeaderElector | None, loop: asyncio.AbstractEventLoop) -> bool:
    """The election loop goes round and, on the leader, kopf's event loop answers within KOPF_ANSWER_SECONDS."""
    if elector is not None and not elector.alive():
        return False
    if not loop.is_running():  # kopf not started (a standby) or stopping
        return True
    answer = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop)
    try:
        answer.result(timeout=KOPF_ANSWER_SECONDS)
    except Exception:
        answer.cancel()
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
