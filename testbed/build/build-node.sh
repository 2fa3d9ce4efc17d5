#!/usr/bin/env bash
# Builds the test bed's real node (testbed/node.py) into a cache keyed by version:
#   - containerd 2.x, its runc shim and ctr, from github.com/containerd/containerd/v2
#     (CGO_ENABLED=0, no btrfs/devmapper/zfs/aufs snapshotters);
#   - kubelet, kube-scheduler, kube-proxy from the same k8s.io/kubernetes module and
#     wrapper as testbed/build/build-go-binaries.sh;
#   - the CNI plugins bridge, host-local, portmap, loopback from
#     github.com/containernetworking/plugins;
#   - CoreDNS from github.com/coredns/coredns, with only the plugins the test bed uses
#     (a wrapper main, as CoreDNS documents for custom builds: no cloud backends);
#   - a static `pause` from the kubernetes module's build/pause/linux/pause.c (cc);
#   - two small images as OCI archives, for containerd's k8s.io namespace:
#     registry.k8s.io/pause:<version> and docker.io/library/busybox:<version>
#     (Debian's busybox-static in a scratch image), built with buildah.
# runc comes from Debian: installed with apt-get when it is missing.
#   build-node.sh [all|k8s|rest]   all (default): everything; k8s: kubelet, kube-scheduler,
#                                  kube-proxy; rest: the others. scripts/build-compiled.sh runs
#                                  the two parts side by side (they share no Go packages).
# Prints the folder. Only the first run compiles; later runs find everything and return at once.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
PAUSE_VERSION="${PAUSE_VERSION:-3.10.2}"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
NODE_BIN_DIR="$CACHE_ROOT/bin/node-k8s-$K8S_VERSION-containerd-$CONTAINERD_VERSION-cni-$CNI_PLUGINS_VERSION-coredns-$COREDNS_VERSION-pause-$PAUSE_VERSION"

say() { echo "build-node: $*" >&2; }
die() { echo "build-node: error: $*" >&2; exit 1; }
timed() {  # what command...: runs it, says how long it took
  local what=$1 started=$SECONDS; shift
  "$@" || die "$what failed (see the output above)"
  say "$what: $((SECONDS - started))s"
}

BINARIES=(containerd containerd-shim-runc-v2 ctr kubelet kube-scheduler kube-proxy coredns pause
          cni/bridge cni/host-local cni/portmap cni/loopback)
IMAGES=(pause.oci.tar busybox.oci.tar)

complete() {
  local f
  for f in "${BINARIES[@]}"; do [[ -x "$NODE_BIN_DIR/$f" ]] || return 1; done
  for f in "${IMAGES[@]}"; do [[ -s "$NODE_BIN_DIR/images/$f" ]] || return 1; done
  command -v runc >/dev/null 2>&1
}
part=${1:-all}
[[ $part == all || $part == k8s || $part == rest ]] || die "unknown part $part (all, k8s or rest)"
if complete; then echo "$NODE_BIN_DIR"; exit 0; fi

# apt-get waits for another apt-get (the images' build installs buildah beside this) instead of failing
APT=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -y -q)
command -v go >/dev/null 2>&1 || die "Go is not installed: install Go >= 1.26 and re-run"
command -v cc >/dev/null 2>&1 || die "no C compiler (cc) for the static pause binary: apt-get install gcc libc6-dev"
if [[ $part != k8s ]] && ! command -v runc >/dev/null 2>&1; then
  say "installing runc (Debian's package) with apt-get: containerd runs containers with it"
  "${APT[@]}" install runc >&2 || { "${APT[@]}" update >&2 && "${APT[@]}" install runc >&2; } \
    || die "could not install runc with apt-get"
fi

mkdir -p "$NODE_BIN_DIR/cni" "$NODE_BIN_DIR/images"
work="$CACHE_ROOT/gobuild"
mkdir -p "$work"
export GOFLAGS="-buildvcs=false -trimpath"
export CGO_ENABLED=0

build_containerd() {
  local tags="no_btrfs no_devmapper no_zfs no_aufs" pkg=github.com/containerd/containerd/v2
  local ldflags="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Package=github.com/containerd/containerd/v2"
  local mod="$work/containerd-$CONTAINERD_VERSION"
  mkdir -p "$mod"
  (cd "$mod"
   printf 'module streamjob.local/containerdbuild\n\ngo 1.26\n\nrequire %s %s\n' "$pkg" "$CONTAINERD_VERSION" > go.mod
   printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "%s/cmd/containerd"\n\t_ "%s/cmd/containerd-shim-runc-v2"\n\t_ "%s/cmd/ctr"\n)\n' "$pkg" "$pkg" "$pkg" > tools.go
   go mod tidy -e >/dev/null 2>&1 || true
   for b in containerd containerd-shim-runc-v2 ctr; do
     [[ -x "$NODE_BIN_DIR/$b" ]] && continue
     say "building $b $CONTAINERD_VERSION (first run only)"
     timed "go build of $b" go build -tags "tools $tags" -ldflags "$ldflags" -o "$NODE_BIN_DIR/$b.tmp" "$pkg/cmd/$b"
     mv "$NODE_BIN_DIR/$b.tmp" "$NODE_BIN_DIR/$b"
   done)
}

# The same wrapper module as build-go-binaries.sh (k8s.io/kubernetes' go.mod points
# its staging modules at ./staging; they are replaced by their published versions).
build_k8s_node() {
  local mod="$work/k8s-node-$K8S_VERSION"
  mkdir -p "$mod"
  (cd "$mod"
   local gomod
   gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
   [[ -f "$gomod" ]] || die "could not download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy"
   local staging_ver="v0.${K8S_VERSION#v1.}"
   {
     echo "module streamjob.local/k8snodebuild"
     echo
     grep -E '^go [0-9]' "$gomod"
     echo
     echo "require k8s.io/kubernetes $K8S_VERSION"
     echo
     echo "replace ("
     grep -E '=> \./staging/src/' "$gomod" | awk -v v="$staging_ver" '{print "\t" $1 " => " $1 " " v}'
     echo ")"
   } > go.mod
   printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kube-proxy"\n)\n' > tools.go
   go mod tidy -e >/dev/null 2>&1 || true
   local missing=() pkgs=() out="$mod/out" b
   for b in kubelet kube-scheduler kube-proxy; do [[ -x "$NODE_BIN_DIR/$b" ]] || missing+=("$b"); done
   if [[ ${#missing[@]} -gt 0 ]]; then
     # one build for the three: common packages compile once, the links overlap the compiles
     for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
     say "building ${missing[*]} $K8S_VERSION (first run only)"
     rm -rf "$out" && mkdir -p "$out"
     timed "go build of ${missing[*]}" go build -tags tools -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${K8S_VERSION#v1.}" \
        -o "$out/" "${pkgs[@]}"
     for b in "${missing[@]}"; do mv "$out/$b" "$NODE_BIN_DIR/$b"; done
   fi)
}

# pause: C, static, as build/pause/Makefile compiles it (the source from the k8s.io/kubernetes module)
build_pause() {
  [[ -x "$NODE_BIN_DIR/pause" ]] && return
  local src
  src=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/build/pause/linux/pause.c
  [[ -f "$src" ]] || die "no $src in the k8s.io/kubernetes module"
  timed "cc of pause" cc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-streamjob" -o "$NODE_BIN_DIR/pause.tmp" "$src"
  mv "$NODE_BIN_DIR/pause.tmp" "$NODE_BIN_DIR/pause"
}

build_cni() {
  local name path
  for path in main/bridge ipam/host-local meta/portmap main/loopback; do
    name=${path#*/}
    [[ -x "$NODE_BIN_DIR/cni/$name" ]] && continue
    say "building CNI plugin $name $CNI_PLUGINS_VERSION"
    local gobin="$work/gobin-cni-$CNI_PLUGINS_VERSION"
    mkdir -p "$gobin"
    timed "go install of CNI $name" env GOBIN="$gobin" go install -ldflags "-s -w" \
      "github.com/containernetworking/plugins/plugins/$path@$CNI_PLUGINS_VERSION"
    mv "$gobin/$name" "$NODE_BIN_DIR/cni/$name"
  done
}

build_coredns() {
  [[ -x "$NODE_BIN_DIR/coredns" ]] && return
  say "building coredns $COREDNS_VERSION (the plugins the test bed uses)"
  local mod="$work/coredns-$COREDNS_VERSION"
  mkdir -p "$mod"
  (cd "$mod"
   printf 'module streamjob.local/corednsbuild\n\ngo 1.26\n\nrequire github.com/coredns/coredns %s\n' "$COREDNS_VERSION" > go.mod
   # the order of dnsserver.Directives is the order plugins see a query (CoreDNS' plugin.cfg)
   cat > main.go <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
	_ "github.com/coredns/coredns/plugin/whoami"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "cache", "template", "kubernetes", "loop", "whoami"}
}

func main() { coremain.Run() }
GO
   go mod tidy -e >/dev/null 2>&1 || true
   timed "go build of coredns" go build -ldflags "-s -w" -o "$NODE_BIN_DIR/coredns.tmp" .
   mv "$NODE_BIN_DIR/coredns.tmp" "$NODE_BIN_DIR/coredns")
}

# Two small images, built with buildah into the local store (scripts/build-images.sh's,
# under its lock), then written as OCI archives for containerd's import.
build_images() {
  local images="$CACHE_ROOT/images"
  command -v buildah >/dev/null 2>&1 || {
    say "installing buildah with apt-get (the node's small images are built with it)"
    "${APT[@]}" install buildah >&2 || die "could not install buildah"
  }
  mkdir -p "$images/tmp"
  exec 8>"$images/.build.lock"
  flock 8
  export TMPDIR="$images/tmp"
  local B=(buildah --root "$images/overlay" --runroot "$images/runroot-overlay" --storage-driver overlay)
  local ctx="$work/node-images"
  rm -rf "$ctx"; mkdir -p "$ctx"

  if [[ ! -s "$NODE_BIN_DIR/images/pause.oci.tar" ]]; then
    local name="registry.k8s.io/pause:$PAUSE_VERSION" c
    mkdir -p "$ctx/pause"
    cp "$NODE_BIN_DIR/pause" "$ctx/pause/pause"
    c=$("${B[@]}" from scratch)
    "${B[@]}" copy "$c" "$ctx/pause/pause" /pause >/dev/null
    "${B[@]}" config --entrypoint '["/pause"]' --user 65535:65535 --os linux --arch amd64 "$c"
    "${B[@]}" commit -q --rm "$c" "$name" >/dev/null
    rm -f "$NODE_BIN_DIR/images/pause.oci.tar"
    "${B[@]}" push -q "$name" "oci-archive:$NODE_BIN_DIR/images/pause.oci.tar.tmp:$name" >/dev/null
    mv "$NODE_BIN_DIR/images/pause.oci.tar.tmp" "$NODE_BIN_DIR/images/pause.oci.tar"
    say "made $name"
  fi

  if [[ ! -s "$NODE_BIN_DIR/images/busybox.oci.tar" ]]; then
    (cd "$ctx" && apt-get download busybox-static >&2) \
      || { apt-get update -q >&2 && (cd "$ctx" && apt-get download busybox-static >&2); } \
      || die "could not download Debian's busybox-static package"
    local deb version name c
    deb=$(ls "$ctx"/busybox-static_*.deb | head -n1)
    version=$(dpkg-deb -f "$deb" Version | sed 's/^[0-9]*://; s/[-+~].*//')
    name="docker.io/library/busybox:$version"
    dpkg-deb -x "$deb" "$ctx/busybox-deb"
    mkdir -p "$ctx/busybox/bin" "$ctx/busybox/tmp" "$ctx/busybox/etc" "$ctx/busybox/root"
    cp "$ctx/busybox-deb/bin/busybox" "$ctx/busybox/bin/busybox"
    for applet in $("$ctx/busybox/bin/busybox" --list); do
      [[ -e "$ctx/busybox/bin/$applet" ]] || ln -s busybox "$ctx/busybox/bin/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$ctx/busybox/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$ctx/busybox/etc/group"
    chmod 1777 "$ctx/busybox/tmp"
    c=$("${B[@]}" from scratch)
    "${B[@]}" copy "$c" "$ctx/busybox" / >/dev/null
    "${B[@]}" config --cmd sh --env PATH=/bin --os linux --arch amd64 \
      --label "io.streamjob.source=debian busybox-static $(dpkg-deb -f "$deb" Version)" "$c"
    "${B[@]}" commit -q --rm "$c" "$name" >/dev/null
    "${B[@]}" push -q "$name" "oci-archive:$NODE_BIN_DIR/images/busybox.oci.tar.tmp:$name" >/dev/null
    mv "$NODE_BIN_DIR/images/busybox.oci.tar.tmp" "$NODE_BIN_DIR/images/busybox.oci.tar"
    echo "$name" > "$NODE_BIN_DIR/images/busybox.name"
    say "made $name from Debian's busybox-static $(dpkg-deb -f "$deb" Version)"
  fi
  rm -rf "$ctx"
}

started=$SECONDS
[[ $part == rest ]] || build_k8s_node
if [[ $part != k8s ]]; then
  build_containerd
  build_cni
  build_coredns
  build_pause
  build_images
fi
if [[ $part == all ]]; then
  complete || die "some outputs are still missing from $NODE_BIN_DIR"
  say "node binaries and images ready in $NODE_BIN_DIR ($((SECONDS - started))s)"
else
  say "node part $part ready in $NODE_BIN_DIR ($((SECONDS - started))s)"
fi
echo "$NODE_BIN_DIR"
