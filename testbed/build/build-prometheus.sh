#!/usr/bin/env bash
# Builds Prometheus (the server and promtool) from its official Go module into
# a cache dir keyed by version. Called by scripts/bootstrap.sh; prints the dir.
# The tests scrape the operator with the real server and lint its exposition
# and the alerting rules with the real promtool.
#
# Built with the `remove_all_sd` tag: the test bed scrapes static 127.0.0.1
# targets only, and the tag drops every cloud service discovery (and its
# dependency tree) from both binaries; static and file SD stay (plugins/minimum.go).
# Built without `builtinassets`: the web UI is not needed, the HTTP API is.
# Only the first run compiles; later runs find the binaries and return at once.
set -euo pipefail

# Prometheus 3.x is published as the Go module version v0.3MM.P (for 3.MM.P).
PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
BIN_DIR="$CACHE_ROOT/bin/prometheus-$PROMETHEUS_MODULE_VERSION"

die() { echo "build-prometheus: $*" >&2; exit 1; }
[[ ${1:-} == --dir ]] && { echo "$BIN_DIR"; exit 0; }  # where it builds, without building

command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 and re-run"
if [[ -x "$BIN_DIR/prometheus" && -x "$BIN_DIR/promtool" ]]; then echo "$BIN_DIR"; exit 0; fi
mkdir -p "$BIN_DIR"

minor=${PROMETHEUS_MODULE_VERSION#v0.}; minor=${minor%%.*}; patch=${PROMETHEUS_MODULE_VERSION##*.}
human="3.$((10#${minor} - 300)).$patch"
gobin="$CACHE_ROOT/gobuild/gobin-prometheus-$PROMETHEUS_MODULE_VERSION"
mkdir -p "$gobin"
export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0
echo "build-prometheus: building prometheus and promtool $human (first run only, a few minutes)" >&2
GOBIN="$gobin" go install -tags remove_all_sd \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$human" \
  "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE_VERSION" \
  "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION" \
  || die "go install of prometheus $PROMETHEUS_MODULE_VERSION failed (see the output above)"
mv "$gobin/prometheus" "$BIN_DIR/prometheus"
mv "$gobin/promtool" "$BIN_DIR/promtool"
echo "$BIN_DIR"
