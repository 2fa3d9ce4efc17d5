#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok: simulated nodes and pods) from its Go module, into a cache keyed
# by version, as build-go-binaries.sh does for the control plane. Used by benchmarks/operator_scale.py
# only (not by bootstrap.sh): the benchmark's load is simulated driver pods on a kwok node.
# kwok runs no stage it is not given: the module's own "fast" stages (node-initialize, node-heartbeat,
# pod-ready, pod-complete, pod-delete: what kwokctl's default cluster uses) are copied beside the
# binary as stages.yaml, for `kwok --config`. Prints the binary's path; only the first run compiles.
set -euo pipefail

KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
BIN_DIR="$CACHE_ROOT/bin/kwok-$KWOK_VERSION"

die() { echo "build-kwok: $*" >&2; exit 1; }

if [[ -x "$BIN_DIR/kwok" && -s "$BIN_DIR/stages.yaml" ]]; then echo "$BIN_DIR/kwok"; exit 0; fi
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 and re-run"
mkdir -p "$BIN_DIR"
gobin="$CACHE_ROOT/gobuild/gobin-kwok-$KWOK_VERSION"
mkdir -p "$gobin"
[[ -x "$BIN_DIR/kwok" ]] || echo "build-kwok: building kwok $KWOK_VERSION (first run only, a few minutes)" >&2
[[ -x "$BIN_DIR/kwok" ]] || GOFLAGS="-buildvcs=false -trimpath" CGO_ENABLED=0 GOBIN="$gobin" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
  || die "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed (see the output above)"
[[ -x "$BIN_DIR/kwok" ]] || mv "$gobin/kwok" "$BIN_DIR/kwok"
src=$(cd "$gobin" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
[[ -d "$src/kustomize/stage" ]] || die "sigs.k8s.io/kwok@$KWOK_VERSION: no kustomize/stage in the module"
for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml pod/fast/pod-ready.yaml \
         pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  echo "---"; cat "$src/kustomize/stage/$f"
done > "$BIN_DIR/stages.yaml.tmp"
mv "$BIN_DIR/stages.yaml.tmp" "$BIN_DIR/stages.yaml"
echo "$BIN_DIR/kwok"
