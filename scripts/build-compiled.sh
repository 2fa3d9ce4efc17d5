#!/usr/bin/env bash
# Everything the test bed compiles from Go modules, one after the other (each build
# takes both cores), in two parts:
#   1. what the local half of the tests needs (scripts/test.sh): the S3 server and helm,
#      Prometheus and promtool, the GitOps runners. Their folders then go, as shell
#      assignments, into the file named by the first argument (when given), so the
#      local half can start while part 2 compiles;
#   2. what the bed needs besides: the control plane and etcd, and the real node.
# Started by scripts/bootstrap.sh in the background, beside the downloads. Prints all the
# folders as shell assignments on stdout at the end, and how long each step took on
# stderr. Each build script returns at once when its binaries are already in the cache.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
local_ready="${1:-}"
started=$SECONDS
took() {
  echo "bootstrap: $1: $((SECONDS - started))s (compiled in the background)" >&2
  started=$SECONDS
}
BIN_DIR=$(bash "$ROOT/testbed/build/build-go-binaries.sh" --s3-and-helm)
took "S3 server, helm"
PROMETHEUS_BIN_DIR=$(bash "$ROOT/testbed/build/build-prometheus.sh")
took "prometheus"
# GitOps consumers (gopher-lua health runner, kstatus) for tests/gitops
GITOPS_BIN_DIR=$(bash "$ROOT/testbed/build/build-gitops-tools.sh")
took "gitops tools"
if [[ -n "$local_ready" ]]; then
  printf 'BIN_DIR=%q\nPROMETHEUS_BIN_DIR=%q\nGITOPS_BIN_DIR=%q\n' "$BIN_DIR" "$PROMETHEUS_BIN_DIR" "$GITOPS_BIN_DIR" \
    >"$local_ready.tmp"
  mv "$local_ready.tmp" "$local_ready"
fi
BIN_DIR=$(bash "$ROOT/testbed/build/build-go-binaries.sh")
took "control plane, etcd"
# the real node (testbed/node.py): containerd, ctr and its runc shim, kubelet, kube-scheduler,
# kube-proxy, CoreDNS, the CNI plugins, pause, and the pause and busybox images; runc is
# Debian's package (build-node.sh installs it with apt-get when it is missing)
NODE_BIN_DIR=$(bash "$ROOT/testbed/build/build-node.sh")
took "node"
printf 'BIN_DIR=%q\nPROMETHEUS_BIN_DIR=%q\nGITOPS_BIN_DIR=%q\nNODE_BIN_DIR=%q\n' \
  "$BIN_DIR" "$PROMETHEUS_BIN_DIR" "$GITOPS_BIN_DIR" "$NODE_BIN_DIR"
