"""The `streamjob-operator` command: parse flags, win the leader Lease, run kopf with our handlers.

Called as the console script (pyproject ``[project.scripts]``) in the
operator's Deployment, and as a subprocess by the end-to-end tests.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import uuid
from collections.abc import Sequence

import kopf

from streamjob_operator.k8s.resources import RuntimeLayout

log = logging.getLogger("streamjob_operator")


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
                        help="serve a liveness probe, e.g. http://0.0.0.0:8080/healthz")
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
    parser.add_argument("--lease-seconds", type=int, default=15, help="leader Lease duration")
    parser.add_argument("--runtime-command", default=os.environ.get("STREAMJOB_RUNTIME_COMMAND", RuntimeLayout.runtime_command),
                        help="the job runtime's command inside the runtime image (the driver container's main process)")
    parser.add_argument("--control-port", type=int, default=RuntimeLayout.control_port, help="driver control endpoint port")
    parser.add_argument("--no-state-repartition", dest="repartition", action="store_false",
                        help="refuse statePartitions changes up front (runtime images whose Spark cannot repartition state)")
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
    args = build_parser().parse_args(argv)
    if args.log_level == "debug":
        args.debug = True
    elif args.log_level == "verbose":
        args.verbose = True
    configure_logging(args.verbose, args.debug)

    from streamjob_operator import handlers, metrics  # handlers registers the kopf handlers
    from streamjob_operator.k8s.clients import load_api_client
    from streamjob_operator.k8s.lease import LeaderLease

    handlers.SETTINGS.layout = RuntimeLayout(runtime_command=args.runtime_command, control_port=args.control_port)
    handlers.SETTINGS.repartition_supported = args.repartition

    if args.metrics_address:
        metrics.serve(args.metrics_address)
        log.info("Serving metrics address=http://%s/metrics", args.metrics_address)
    metrics.LEADER.set(0)
    lease = None
    if args.leader_election:
        identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        lease = LeaderLease(load_api_client(), args.lease_namespace, args.lease_name, identity, lease_seconds=args.lease_seconds,
                            renew_seconds=max(1.0, args.lease_seconds / 3))
        lease.acquire()
        lease.keep_renewing()
    metrics.LEADER.set(1)  # losing the Lease ends the process (lease.py): no path back to 0 while serving
    namespaces = args.namespace
    log.info("Started operator namespaces=%s leaderElection=%s driverScript=%s",
             ",".join(namespaces) or "*", args.leader_election, args.runtime_command)
    try:
        kopf.run(
            standalone=True,  # exclusivity comes from the Lease above, not kopf peering
            namespaces=namespaces,
            clusterwide=not namespaces,
            liveness_endpoint=args.liveness,
        )
    finally:
        metrics.LEADER.set(0)
        if lease is not None:
            lease.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
