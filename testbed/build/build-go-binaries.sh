#!/usr/bin/env bash
# Builds the test bed's real Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kubectl), etcd, the S3 server and helm from their
# official Go modules, into a cache keyed by version. Called by scripts/build-compiled.sh.
# Only the first run compiles; later runs find the binaries and return at once.
#   build-go-binaries.sh [NAME...]   builds the named binaries only (default: all six;
#                                    the bed needs all but helm at its start)
# Prints the folder, which does not depend on what was asked for.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.8}"
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
BIN_DIR="$CACHE_ROOT/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-s3-$VERSITYGW_VERSION-helm-$HELM_VERSION"

die() { echo "build-go-binaries: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 (https://go.dev/doc/install or 'apt-get install golang-1.26') and re-run"
mkdir -p "$BIN_DIR"

ALL=(kube-apiserver kube-controller-manager kubectl etcd versitygw helm)
wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=("${ALL[@]}")
need=()
for b in "${wanted[@]}"; do
  [[ " ${ALL[*]} " == *" $b "* ]] || die "unknown binary $b (one of: ${ALL[*]})"
  [[ -x "$BIN_DIR/$b" ]] || need+=("$b")
done
if [[ ${#need[@]} -eq 0 ]]; then echo "$BIN_DIR"; exit 0; fi
needed() { [[ " ${need[*]} " == *" $1 "* ]]; }

work="$CACHE_ROOT/gobuild"
mkdir -p "$work"
export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0

# A wrapper module pins k8s.io/kubernetes and replaces each staging module
# (k8s.io/api, k8s.io/client-go, ...) with its published version of the
# same release: k8s.io/kubernetes' own go.mod points them at ./staging, which
# 'go install' refuses.
build_k8s() {
  local mod="$work/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  (cd "$mod"
   local gomod
   gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
   [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
   local staging_ver="v0.${K8S_VERSION#v1.}"
   {
     echo "module streamjob.local/k8sbuild"
     echo
     grep -E '^go [0-9]' "$gomod"
     echo
     echo "require k8s.io/kubernetes $K8S_VERSION"
     echo
     echo "replace ("
     grep -E '=> \./staging/src/' "$gomod" | awk -v v="$staging_ver" '{print "\t" $1 " => " $1 " " v}'
     echo ")"
   } > go.mod
   cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
   go mod tidy -e >/dev/null 2>&1 || true
   # one build for the three: their common packages compile once and the links overlap the compiles
   local pkgs=() out="$mod/out"
   for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
   echo "build-go-binaries: building $* $K8S_VERSION (first run only, several minutes)" >&2
   rm -rf "$out" && mkdir -p "$out"
   go build -tags tools -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#v1.}" \
      -o "$out/" "${pkgs[@]}" || die "go build of $* failed (see the output above)"
   for b in "$@"; do mv "$out/$b" "$BIN_DIR/$b"; done)
}

build_etcd() {
  # etcd's server module carries replace directives too, so it is built from
  # a wrapper module as well.
  [[ -x "$BIN_DIR/etcd" ]] && return
  echo "build-go-binaries: building etcd $ETCD_VERSION" >&2
  local mod="$work/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  (cd "$mod"
   printf 'module streamjob.local/etcdbuild\n\ngo 1.24.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
   printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
   go mod tidy -e >/dev/null 2>&1 || true
   go build -tags tools -ldflags "-s -w" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3 || die "go build of etcd $ETCD_VERSION failed"
   mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd")
}

build_simple() {  # name module@version binary-name-in-GOBIN
  local name=$1 pkg=$2 produced=$3
  [[ -x "$BIN_DIR/$name" ]] && return
  echo "build-go-binaries: building $name ($pkg)" >&2
  local gobin="$work/gobin-$name"
  mkdir -p "$gobin"
  GOBIN="$gobin" go install "$pkg" || die "go install $pkg failed"
  mv "$gobin/$produced" "$BIN_DIR/$name"
}

k8s=()
for b in kube-apiserver kube-controller-manager kubectl; do needed "$b" && k8s+=("$b"); done
[[ ${#k8s[@]} -eq 0 ]] || build_k8s "${k8s[@]}"
needed etcd && build_etcd
needed versitygw && build_simple versitygw "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" versitygw
needed helm && build_simple helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm
echo "$BIN_DIR"
