#!/usr/bin/env bash
# Everything the test bed compiles from Go modules, one after the other (each build
# takes both cores): the control plane, etcd, the S3 server and helm; Prometheus and
# promtool; the GitOps runners; the real node. Started by scripts/bootstrap.sh in the
# background, beside the downloads. Prints the folders as shell assignments on stdout,
# and how long each step took on stderr. Each build script returns at once when its
# binaries are already in the cache.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$SECONDS
took() {
  echo "bootstrap: $1: $((SECONDS - started))s (compiled in the background)" >&2
  started=$SECONDS
}
BIN_DIR=$(bash "$ROOT/testbed/build/build-go-binaries.sh")
took "control plane, etcd, S3 server, helm"
PROMETHEUS_BIN_DIR=$(bash "$ROOT/testbed/build/build-prometheus.sh")
took "prometheus"
# GitOps consumers (gopher-lua health runner, kstatus) for tests/gitops
GITOPS_BIN_DIR=$(bash "$ROOT/testbed/build/build-gitops-tools.sh")
took "gitops tools"
# the real node (testbed/node.py): containerd, ctr and its runc shim, kubelet, kube-scheduler,
# kube-proxy, CoreDNS, the CNI plugins, pause, and the pause and busybox images; runc is
# Debian's package (build-node.sh installs it with apt-get when it is missing)
NODE_BIN_DIR=$(bash "$ROOT/testbed/build/build-node.sh")
took "node"
printf 'BIN_DIR=%q\nPROMETHEUS_BIN_DIR=%q\nGITOPS_BIN_DIR=%q\nNODE_BIN_DIR=%q\n' \
  "$BIN_DIR" "$PROMETHEUS_BIN_DIR" "$GITOPS_BIN_DIR" "$NODE_BIN_DIR"
