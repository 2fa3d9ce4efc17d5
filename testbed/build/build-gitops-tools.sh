#!/usr/bin/env bash
# Builds the GitOps consumers the tests run StreamJob objects through, from
# their Go modules, into a cache keyed by version (like build-go-binaries.sh):
#   - lua-health: runs an Argo CD health.lua with gopher-lua, Argo CD's interpreter;
#   - kstatus: sigs.k8s.io/cli-utils' kstatus status.Compute, what Flux reads.
# Sources: testbed/build/gitops-tools/. Called by scripts/bootstrap.sh; prints the
# directory. Only the first run compiles; later runs return at once.
set -euo pipefail

GOPHERLUA_VERSION="${GOPHERLUA_VERSION:-v1.1.1}"   # the version Argo CD v2.x/v3.x requires
CLIUTILS_VERSION="${CLIUTILS_VERSION:-v0.37.2}"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC_KEY=$(cat "$HERE"/gitops-tools/*/main.go | sha256sum | cut -c1-8)
BIN_DIR="$CACHE_ROOT/bin/gitops-gopherlua-$GOPHERLUA_VERSION-cliutils-$CLIUTILS_VERSION-src-$SRC_KEY"

die() { echo "build-gitops-tools: $*" >&2; exit 1; }
[[ ${1:-} == --dir ]] && { echo "$BIN_DIR"; exit 0; }  # where it builds, without building
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 and re-run"
if [[ -x "$BIN_DIR/lua-health" && -x "$BIN_DIR/kstatus" ]]; then echo "$BIN_DIR"; exit 0; fi
mkdir -p "$BIN_DIR"

mod="$CACHE_ROOT/gobuild/gitops-$GOPHERLUA_VERSION-$CLIUTILS_VERSION"
rm -rf "$mod" && mkdir -p "$mod"
cp -r "$HERE/gitops-tools/lua-health" "$HERE/gitops-tools/kstatus" "$mod/"
export GOFLAGS="-buildvcs=false -trimpath" CGO_ENABLED=0
echo "build-gitops-tools: building lua-health (gopher-lua $GOPHERLUA_VERSION) and kstatus (cli-utils $CLIUTILS_VERSION), first run only" >&2
(cd "$mod"
 printf 'module streamjob.local/gitopstools\n\ngo 1.23\n' > go.mod
 go get "github.com/yuin/gopher-lua@$GOPHERLUA_VERSION" "sigs.k8s.io/cli-utils@$CLIUTILS_VERSION" sigs.k8s.io/yaml >&2 \
   || die "could not fetch the Go modules (see above)"
 go mod tidy >&2 || die "go mod tidy failed"
 for b in lua-health kstatus; do
   go build -ldflags "-s -w" -o "$BIN_DIR/$b.tmp" "./$b" || die "go build of $b failed (see above)"
   mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
 done)
echo "$BIN_DIR"
