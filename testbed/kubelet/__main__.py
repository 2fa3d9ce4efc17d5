"""Entry point of the process kubelet: ``python -m testbed.kubelet --kubeconfig ... --state-dir ...``.

Started by ``testbed.cluster.TestBed``; runs until SIGTERM/SIGINT, then stops
every pod process it started.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from types import FrameType

from testbed import locate
from testbed.kubelet.agent import Kubelet
from testbed.kubelet.images import default_environment


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testbed.kubelet", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="kubeconfig with the node's credentials")
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--state-dir", required=True, type=Path, help="where pod dirs and logs go")
    parser.add_argument("--apiserver-port", required=True, type=int, help="for KUBERNETES_SERVICE_PORT")
    parser.add_argument("--apiserver-host", default="127.0.0.1", help="for KUBERNETES_SERVICE_HOST")
    parser.add_argument("--jars-dir", type=Path, default=None, help="s3a jars for the runtime image")
    parser.add_argument("--backoff-initial", type=float, default=1.0, help="first crash-loop back-off, seconds")
    parser.add_argument("--backoff-max", type=float, default=30.0, help="longest crash-loop back-off, seconds")
    parser.add_argument("--tls-cert-file", type=Path, default=None, help="serving cert of the log endpoint")
    parser.add_argument("--tls-private-key-file", type=Path, default=None)
    parser.add_argument("--client-ca-file", type=Path, default=None, help="CA of the API server's kubelet client cert")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(threadName)s %(name)s: %(message)s")
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)

    kubelet = Kubelet(
        kubeconfig=args.kubeconfig,
        node_name=args.node_name,
        state_dir=args.state_dir,
        apiserver_host=args.apiserver_host,
        apiserver_port=args.apiserver_port,
        image_env=default_environment(args.jars_dir),
        kubelet_version=locate.K8S_VERSION,
        backoff_initial=args.backoff_initial,
        backoff_max=args.backoff_max,
        serving=(args.tls_cert_file, args.tls_private_key_file, args.client_ca_file)
        if args.tls_cert_file and args.tls_private_key_file and args.client_ca_file
        else None,
    )
    done = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger(__name__).info("Received signal=%d, stopping", signum)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    loop = threading.Thread(target=kubelet.run, name="pod-watch", daemon=True)
    loop.start()
    while not done.wait(1):
        if not loop.is_alive():
            raise SystemExit("kubelet: the pod watch loop ended unexpectedly")
    kubelet.stop()


if __name__ == "__main__":
    main()
