#!/usr/bin/env bash
# Everything the test bed compiles from Go modules, in two stages (a cold run's figures:
# docs/design/ci-runs.md):
#   1. what the bed needs at its start, as two chains side by side: the Kubernetes commands
#      and etcd (one chain: they share most of their packages, which compile once), and
#      containerd, the CNI plugins, CoreDNS, the S3 server, pause and the node's two small
#      images (the other: nothing in common with the first, and its downloads and links
#      fill the first chain's gaps);
#   2. what only some tests need: helm, Prometheus and promtool, the GitOps runners.
#
#   build-compiled.sh            builds both stages, then prints the folders as shell
#                                assignments on stdout
#   build-compiled.sh READY      writes the folders to READY after stage 1 and goes on with
#                                stage 2 (scripts/test.sh's bootstrap starts the tests then;
#                                a test that needs a stage-2 tool waits for it:
#                                testbed/locate.py's await_compiled)
#
# Holds $STREAMJOB_CACHE/.compile.lock from start to end: a second run (another clone's
# bootstrap) waits for this one, and so do the tests waiting for stage 2. Started by
# scripts/bootstrap.sh in the background; says how long each step took on stderr. Each
# build script returns at once when its binaries are already in the cache.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
BUILD="$ROOT/testbed/build"
ready=${1:-}
mkdir -p "$CACHE_ROOT"
exec 7>"$CACHE_ROOT/.compile.lock"
flock 7

started=$SECONDS
took() {
  echo "bootstrap: $1: $((SECONDS - started))s (compiled in the background)" >&2
  started=$SECONDS
}

# stage 1, chain two (a subshell in the background): the node's parts that are not Kubernetes,
# and the S3 server
rest_log="$CACHE_ROOT/build-compiled-node-rest.log"
( bash "$BUILD/build-node.sh" rest >/dev/null
  bash "$BUILD/build-go-binaries.sh" versitygw >/dev/null ) 2>"$rest_log" &
rest_pid=$!
trap 'kill "$rest_pid" 2>/dev/null || true' EXIT
# chain one: the control plane and etcd, then the node's Kubernetes commands
BIN_DIR=$(bash "$BUILD/build-go-binaries.sh" kube-apiserver kube-controller-manager kubectl etcd)
took "control plane, etcd"
bash "$BUILD/build-node.sh" k8s >/dev/null
took "kubelet, kube-scheduler, kube-proxy"
rest_rc=0
wait "$rest_pid" || rest_rc=$?
trap - EXIT
cat "$rest_log" >&2
[[ $rest_rc -eq 0 ]] || { echo "build-compiled: the node's other parts or the S3 server failed (above)" >&2; exit 1; }
took "waiting for containerd, CNI, CoreDNS, the S3 server, the node's images"
NODE_BIN_DIR=$(bash "$BUILD/build-node.sh" all)  # checks every part is there
assignments=$(printf 'BIN_DIR=%q\nPROMETHEUS_BIN_DIR=%q\nGITOPS_BIN_DIR=%q\nNODE_BIN_DIR=%q\n' \
  "$BIN_DIR" "$(bash "$BUILD/build-prometheus.sh" --dir)" "$(bash "$BUILD/build-gitops-tools.sh" --dir)" "$NODE_BIN_DIR")
if [[ -n $ready ]]; then
  echo "$assignments" >"$ready.tmp" && mv "$ready.tmp" "$ready"
  # the tests' output is on the terminal now: stage 2 says what it did in a log (scripts/test.sh prints it)
  exec 2>"$CACHE_ROOT/build-compiled.log"
fi

# stage 2: helm first (the local half's first tests render the chart), then niced: with READY the tests
# run beside it, and the bed's half is the run's floor
bash "$BUILD/build-go-binaries.sh" helm >/dev/null
took "helm"
[[ -z $ready ]] || renice -n 10 -p $$ >/dev/null
bash "$BUILD/build-prometheus.sh" >/dev/null
took "prometheus"
# GitOps consumers (gopher-lua health runner, kstatus) for tests/gitops
bash "$BUILD/build-gitops-tools.sh" >/dev/null
took "gitops tools"
[[ -n $ready ]] || echo "$assignments"
