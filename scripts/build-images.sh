#!/usr/bin/env bash
# Builds the runtime and operator images on this machine with buildah (no
# container daemon, no registry), from the same Dockerfiles a user builds with
# `docker build` (images/*/Dockerfile, byte for byte):
#   - the Dockerfiles' base (FROM docker.io/library/debian:12.11-slim) cannot be
#     pulled here, so it is made from Debian's packages with debootstrap and
#     given that exact name in the local image store; it trusts what this machine
#     trusts (the extra CA certificates in /usr/local/share/ca-certificates, and
#     pip's cert setting), so RUN steps reach PyPI and Maven Central as the host does;
#   - each image is rebuilt only when a content hash of its inputs (the
#     Dockerfile, the files it copies, the base) changes; the store and the hashes
#     live in $STREAMJOB_CACHE/images, like the other downloads;
#   - pip and Maven caches of the builds are buildah cache mounts, kept there too.
# Needs root (buildah --isolation chroot) and installs buildah and debootstrap
# with apt-get when they are missing. Called by scripts/bootstrap.sh.
# Prints the image store directory on stdout; progress goes to stderr.
# Sizes and times: docs/images.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
IMAGES="$CACHE_ROOT/images"
say() { echo "build-images: $*" >&2; }
die() { echo "build-images: error: $*" >&2; exit 1; }

BASE_IMAGE=docker.io/library/debian:12.11-slim
DEBIAN_SUITE=bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n1)
RUNTIME_IMAGE="ghcr.io/streamjob/streamjob-runtime:$VERSION"
OPERATOR_IMAGE="ghcr.io/streamjob/streamjob-operator:$VERSION"

[[ $(id -u) -eq 0 ]] || die "building images here needs root (buildah --isolation chroot); on a machine with Docker use docker build (docs/images.md)"
for tool in buildah debootstrap; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "installing $tool with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah debootstrap >&2 \
      || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah debootstrap >&2; } \
      || die "could not install buildah and debootstrap with apt-get"
  fi
done

mkdir -p "$IMAGES"
exec 8>"$IMAGES/.build.lock"
flock 8

# One definition of the store, shared with testbed/imagestore.py.
export TMPDIR="$IMAGES/tmp"  # buildah keeps RUN --mount=type=cache dirs under $TMPDIR/buildah-cache-0
mkdir -p "$TMPDIR"
B=(buildah --root "$IMAGES/overlay" --runroot "$IMAGES/runroot-overlay" --storage-driver overlay)

exists() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# 1. the base image, from Debian's packages, under the name the Dockerfiles use
if ! exists "$BASE_IMAGE"; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  [[ -n "$mirror" ]] || mirror=$(awk '$1=="deb" && $3=="'$DEBIAN_SUITE'" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  say "making $BASE_IMAGE with debootstrap --variant=minbase $DEBIAN_SUITE from $mirror (first run only)"
  work="$IMAGES/base.partial"
  if [[ ! -f "$work/debootstrap.done" ]]; then
    rm -rf "$work"
    mkdir -p "$work"
    debootstrap --variant=minbase --include=ca-certificates "$DEBIAN_SUITE" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
      || { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    touch "$work/debootstrap.done"
  fi
  # this machine's extra trust anchors (a TLS-intercepting egress proxy, say)
  shopt -s nullglob
  extra=(/usr/local/share/ca-certificates/*.crt)
  if (( ${#extra[@]} )); then
    cp "${extra[@]}" "$work/rootfs/usr/local/share/ca-certificates/"
    TMPDIR=/tmp chroot "$work/rootfs" update-ca-certificates >/dev/null
  fi
  if [[ -f /etc/pip.conf ]]; then cp /etc/pip.conf "$work/rootfs/etc/pip.conf"; fi
  # what the official slim image leaves out: downloaded packages and package lists
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/log/"*
  printf 'deb %s %s main\ndeb %s %s-updates main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
    "$mirror" "$DEBIAN_SUITE" "$mirror" "$DEBIAN_SUITE" "$DEBIAN_SUITE" >"$work/rootfs/etc/apt/sources.list"
  tar -C "$work/rootfs" --numeric-owner -czf "$work/rootfs.tar.gz" .
  printf 'FROM scratch\nADD rootfs.tar.gz /\nCMD ["bash"]\n' >"$work/Containerfile"
  "${B[@]}" bud --isolation chroot --layers=false -t "$BASE_IMAGE" -f "$work/Containerfile" "$work" >&2
  rm -rf "$work"
fi
base_id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE")

# 2. seed the build caches from this machine's pip and Maven caches (same
#    artifacts, same checksums; saves downloading pyspark and the AWS SDK again)
seed() {  # from to
  [[ -d "$1" && ! -e "$2" ]] || return 0
  mkdir -p "$(dirname "$2")"
  cp -al "$1" "$2.partial" 2>/dev/null || cp -a "$1" "$2.partial"
  mv "$2.partial" "$2"
}
pip_cache=$(python3 -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")
seed "$pip_cache/wheels" "$TMPDIR/buildah-cache-0/streamjob-pip/wheels"
seed "$HOME/.m2/repository" "$TMPDIR/buildah-cache-0/streamjob-m2/repository"

# 3. the images, each keyed by the hash of what goes into it
inputs_hash() {  # dockerfile
  {
    echo "$BASE_IMAGE $base_id"
    cd "$ROOT"
    find "$1" images/constraints.txt images/runtime pyproject.toml README.md operator job_runtime cli testbed \
      -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}
build() {  # name dockerfile
  local name=$1 dockerfile=$2 hash stamp
  hash=$(inputs_hash "$dockerfile")
  stamp="$IMAGES/$(basename "$(dirname "$dockerfile")").hash"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$hash" ]] && exists "$name"; then
    say "$name is up to date (inputs $hash)"
    return 0
  fi
  say "building $name from $dockerfile (inputs $hash)"
  local started=$SECONDS
  "${B[@]}" bud --isolation chroot --layers --pull=never \
    --label "io.streamjob.inputs=$hash" -t "$name" -f "$ROOT/$dockerfile" "$ROOT" >"$IMAGES/build-$(basename "$(dirname "$dockerfile")").log" 2>&1 \
    || { tail -n 40 "$IMAGES/build-$(basename "$(dirname "$dockerfile")").log" >&2; die "building $name failed (log above)"; }
  echo "$hash" >"$stamp"
  say "built $name in $((SECONDS - started))s"
}
build "$OPERATOR_IMAGE" images/operator/Dockerfile
build "$RUNTIME_IMAGE" images/runtime/Dockerfile
echo "$IMAGES"
