"""Where the test bed finds its binaries, jars and Python environment.

Called by ``testbed.cluster``, ``testbed.node`` and the build scripts' callers. The paths come
from the environment that ``scripts/bootstrap.sh`` writes to ``.streamjob-env``
(``STREAMJOB_BIN_DIR``, ``STREAMJOB_JARS_DIR``); without it, the version-keyed
cache folders are searched.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import time
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parent / "build" / "build-go-binaries.sh"


def _pinned(name: str, script: Path = BUILD_SCRIPT) -> str:
    """A version pinned in a build script (`NAME="${NAME:-v1.2.3}"`): one source of truth."""
    match = re.search(rf'^{name}="\$\{{{name}:-([^}}]+)\}}"', script.read_text(), flags=re.M)
    if match is None:
        raise RuntimeError(f"{script}: no default for {name}")
    return os.environ.get(name) or match.group(1)


K8S_VERSION = _pinned("K8S_VERSION")
ETCD_VERSION = _pinned("ETCD_VERSION")
VERSITYGW_VERSION = _pinned("VERSITYGW_VERSION")
HELM_VERSION = _pinned("HELM_VERSION")

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "versitygw")


class MissingToolError(RuntimeError):
    """A binary or jar the test bed needs is not there; the message says how to get it."""


def cache_root() -> Path:
    explicit = os.environ.get("STREAMJOB_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamjob"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def bin_dir() -> Path:
    explicit = os.environ.get("STREAMJOB_BIN_DIR")
    candidate = (
        Path(explicit)
        if explicit
        else cache_root()
        / "bin"
        / f"k8s-{K8S_VERSION}-etcd-{ETCD_VERSION}-s3-{VERSITYGW_VERSION}-helm-{HELM_VERSION}"
    )
    missing = [b for b in BINARIES if not os.access(candidate / b, os.X_OK)]
    if missing:
        raise MissingToolError(
            f"test bed binaries {', '.join(missing)} are missing from {candidate}: "
            "run scripts/bootstrap.sh (or bash testbed/build/build-go-binaries.sh) to build them"
        )
    return candidate


# Under pytest's 900 s a test: a test waiting for a tool still has time to run.
COMPILE_WAIT_SECONDS = 780.0


def await_compiled(*wanted: Path, timeout: float = COMPILE_WAIT_SECONDS) -> None:
    """Waits while scripts/build-compiled.sh still runs, or until the ``wanted`` binaries are there: scripts/test.sh
    starts the tests once the bed's own binaries are built and leaves helm, Prometheus and the GitOps runners
    compiling beside them (a cold machine's first run). The script holds ``$STREAMJOB_CACHE/.compile.lock`` from
    its start to its end."""
    lock = cache_root() / ".compile.lock"
    if not lock.exists():
        return
    deadline = time.monotonic() + timeout
    with lock.open("rb") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                if wanted and all(os.access(path, os.X_OK) for path in wanted):
                    return
                if time.monotonic() > deadline:
                    raise MissingToolError(
                        f"scripts/build-compiled.sh is still compiling after {timeout:.0f} s "
                        f"(its log: {cache_root() / 'build-compiled.log'})"
                    ) from None
                time.sleep(1.0)
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            return


def helm() -> Path:
    """helm, from testbed/build/build-go-binaries.sh (the second stage of a cold bootstrap: waits for it)."""
    path = bin_dir() / "helm"
    if not os.access(path, os.X_OK):
        await_compiled(path)
    if not os.access(path, os.X_OK):
        raise MissingToolError(f"{path} is missing: run scripts/bootstrap.sh "
                               "(or bash testbed/build/build-go-binaries.sh helm) to build it")
    return path


PROMETHEUS_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-prometheus.sh")


def prometheus_bin_dir() -> Path:
    """prometheus and promtool from testbed/build/build-prometheus.sh ($STREAMJOB_PROMETHEUS_BIN_DIR)."""
    explicit = os.environ.get("STREAMJOB_PROMETHEUS_BIN_DIR")
    if explicit:
        candidate = Path(explicit)
    else:
        match = re.search(r'^PROMETHEUS_MODULE_VERSION="\$\{PROMETHEUS_MODULE_VERSION:-([^}]+)\}"',
                          PROMETHEUS_BUILD_SCRIPT.read_text(), flags=re.M)
        assert match is not None, f"{PROMETHEUS_BUILD_SCRIPT}: no default for PROMETHEUS_MODULE_VERSION"
        candidate = cache_root() / "bin" / f"prometheus-{os.environ.get('PROMETHEUS_MODULE_VERSION') or match.group(1)}"
    missing = [b for b in ("prometheus", "promtool") if not os.access(candidate / b, os.X_OK)]
    if missing:
        await_compiled(*(candidate / b for b in missing))
        missing = [b for b in missing if not os.access(candidate / b, os.X_OK)]
    if missing:
        raise MissingToolError(f"{', '.join(missing)} missing from {candidate}: run scripts/bootstrap.sh "
                               "(or bash testbed/build/build-prometheus.sh) to build them")
    return candidate


def jars_dir() -> Path | None:
    """The s3a jars from testbed/build/fetch-jars.sh, or None when they were not fetched."""
    explicit = os.environ.get("STREAMJOB_JARS_DIR")
    if explicit:
        path = Path(explicit)
        return path if (path / ".complete").exists() else None
    import pyspark

    spark_version = pyspark.__version__
    candidates = sorted((cache_root() / "jars").glob(f"spark-{spark_version}-hadoop-*/.complete"))
    return candidates[-1].parent if candidates else None


def require_jars_dir() -> Path:
    found = jars_dir()
    if found is None:
        raise MissingToolError(
            "the s3a jars (hadoop-aws + AWS SDK bundle) were not fetched: "
            f"run bash testbed/build/fetch-jars.sh {sys.prefix}"
        )
    return found


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def venv_bin() -> Path:
    return Path(sys.executable).parent


KAFKA_FETCH_SCRIPT = BUILD_SCRIPT.with_name("fetch-kafka.sh")


def kafka_dir() -> Path:
    """The Kafka broker jars from testbed/build/fetch-kafka.sh ($STREAMJOB_KAFKA_DIR)."""
    explicit = os.environ.get("STREAMJOB_KAFKA_DIR")
    if explicit:
        candidate = Path(explicit)
    else:
        kafka, log4j = (_pinned(n, KAFKA_FETCH_SCRIPT) for n in ("KAFKA_VERSION", "LOG4J_VERSION"))
        candidate = cache_root() / "jars" / f"kafka-broker-{kafka}-log4j-{log4j}"
    if not (candidate / ".complete").exists():
        raise MissingToolError(f"the Kafka broker jars are missing from {candidate}: run scripts/bootstrap.sh "
                               "(or bash testbed/build/fetch-kafka.sh) to fetch them")
    return candidate


NODE_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-node.sh")
NODE_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kube-scheduler", "kube-proxy", "coredns",
                 "pause", "cni/bridge", "cni/host-local", "cni/portmap", "cni/loopback")


def node_pin(name: str) -> str:
    """A version pinned in testbed/build/build-node.sh (CONTAINERD_VERSION, PAUSE_VERSION...)."""
    return _pinned(name, NODE_BUILD_SCRIPT)


def node_bin_dir() -> Path:
    """The real node's binaries and small images from testbed/build/build-node.sh ($STREAMJOB_NODE_BIN_DIR)."""
    explicit = os.environ.get("STREAMJOB_NODE_BIN_DIR")
    candidate = (
        Path(explicit)
        if explicit
        else cache_root() / "bin" / (
            f"node-k8s-{K8S_VERSION}-containerd-{node_pin('CONTAINERD_VERSION')}-cni-{node_pin('CNI_PLUGINS_VERSION')}"
            f"-coredns-{node_pin('COREDNS_VERSION')}-pause-{node_pin('PAUSE_VERSION')}"
        )
    )
    missing = [b for b in NODE_BINARIES if not os.access(candidate / b, os.X_OK)]
    missing += [f"images/{a}" for a in ("pause.oci.tar", "busybox.oci.tar") if not (candidate / "images" / a).is_file()]
    if missing:
        raise MissingToolError(
            f"the real node's {', '.join(missing)} are missing from {candidate}: "
            "run scripts/bootstrap.sh (or bash testbed/build/build-node.sh) to build them"
        )
    return candidate
