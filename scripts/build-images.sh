#!/usr/bin/env bash
# Builds the runtime and operator images on this machine with buildah (no
# container daemon, no registry), from the same Dockerfiles a user builds with
# `docker build` (Dockerfile for the runtime, images/operator/Dockerfile, byte for byte):
#   - the Dockerfiles' base (FROM docker.io/library/debian:12.11-slim) cannot be
#     pulled here, so it is made from Debian's packages with debootstrap and
#     given that exact name in the local image store; it trusts what this machine
#     trusts (the extra CA certificates in /usr/local/share/ca-certificates, and
#     pip's cert setting), so RUN steps reach PyPI and Maven Central as the host does;
#   - each image is rebuilt only when a content hash of its inputs (the
#     Dockerfile, the files it copies, the base) changes; the store and the hashes
#     live in $STREAMJOB_CACHE/images, like the other downloads;
#   - pip and Maven caches of the builds are buildah cache mounts, kept there too,
#     seeded from this machine's pip cache and Maven repository (step 2).
# Needs root (buildah --isolation chroot) and installs buildah and debootstrap
# with apt-get when they are missing. Called by scripts/bootstrap.sh.
# Usage: build-images.sh [--base-only]
# Prints the image store directory on stdout; progress goes to stderr.
# Sizes and times: docs/design/image-builds.md.
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
export TMPDIR="$IMAGES/tmp"
# buildah keeps RUN --mount=type=cache dirs under $TMPDIR/buildah-cache (1.28,
# Debian 12's) or $TMPDIR/buildah-cache-<uid> (later releases): one directory
mkdir -p "$TMPDIR/buildah-cache"
[[ -e "$TMPDIR/buildah-cache-0" ]] || ln -s buildah-cache "$TMPDIR/buildah-cache-0"
B=(buildah --root "$IMAGES/overlay" --runroot "$IMAGES/runroot-overlay" --storage-driver overlay)

exists() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# 1. the base image, from Debian's packages, under the name the Dockerfiles use
if ! exists "$BASE_IMAGE"; then
  base_started=$SECONDS
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
  tar -C "$work/rootfs" --numeric-owner -cf "$work/rootfs.tar" .  # not compressed: read once, right away
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$work/Containerfile"
  "${B[@]}" bud --isolation chroot --layers=false -t "$BASE_IMAGE" -f "$work/Containerfile" "$work" >&2
  rm -rf "$work"
  say "made $BASE_IMAGE in $((SECONDS - base_started))s"
fi
if [[ "${1:-}" == --base-only ]]; then exit 0; fi  # bootstrap.sh starts the base early
base_id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE_IMAGE")

# 2. seed the build caches from this machine's: hard links of what they lack
#    (same artifacts, same checksums), on every build, so the images' RUN steps
#    do not download again what bootstrap.sh already has: pip's cache (http and
#    built wheels; the wheels also flat in wheelhouse/, which the Dockerfiles'
#    pip install reads first: pyspark is an sdist on PyPI, built once, by the
#    venv) and Maven's repository (the AWS SDK bundle, the Kafka connector)
seed() {  # from to
  [[ -d "$1" ]] || return 0
  mkdir -p "$2"
  cp -al -n "$1/." "$2/" 2>/dev/null || cp -a -n "$1/." "$2/"
}
pip_cache=$(python3 -m pip cache dir 2>/dev/null || echo "$HOME/.cache/pip")
mounts="$TMPDIR/buildah-cache"
seed "$pip_cache" "$mounts/streamjob-pip"
if [[ -d "$pip_cache/wheels" ]]; then
  mkdir -p "$mounts/streamjob-pip/wheelhouse"
  find "$pip_cache/wheels" -name '*.whl' -exec ln -f {} "$mounts/streamjob-pip/wheelhouse/" \;
fi
seed "$HOME/.m2/repository" "$mounts/streamjob-m2/repository"

# 3. the images, each keyed by the hash of what goes into it
inputs_hash() {  # dockerfile
  {
    echo "$BASE_IMAGE $base_id"
    cd "$ROOT"
    find "$1" images/constraints.txt images/runtime pyproject.toml README.md .dockerignore contract operator job_runtime cli \
      -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum
  } | sha256sum | cut -c1-16
}
stamp_lines() { while IFS= read -r line; do printf '%(%T)T %s\n' -1 "$line"; done; }
step_times() {  # log: seconds each STEP took (to the next STEP or the end), slowest first
  awk '{ split($1, t, ":"); now = t[1] * 3600 + t[2] * 60 + t[3] }
       / STEP [0-9]+\/[0-9]+: / { if (step != "") printf "%5ds %s\n", now - start, step; start = now; step = substr($0, 10, 110) }
       END { if (step != "") printf "%5ds %s\n", now - start, step }' "$1" | sort -rn
}
build() {  # name dockerfile kind
  local name=$1 dockerfile=$2 kind=$3 hash stamp
  hash=$(inputs_hash "$dockerfile")
  stamp="$IMAGES/$kind.hash"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$hash" ]] && exists "$name"; then
    say "$name is up to date (inputs $hash)"
    return 0
  fi
  say "building $name from $dockerfile (inputs $hash; log: $IMAGES/build-$kind.log)"
  local started=$SECONDS
  "${B[@]}" bud --isolation chroot --layers --force-rm --pull=never \
    --label "io.streamjob.inputs=$hash" -t "$name" -f "$ROOT/$dockerfile" "$ROOT" 2>&1 | stamp_lines >"$IMAGES/build-$kind.log" \
    || { tail -n 40 "$IMAGES/build-$kind.log" >&2; die "building $name failed (log above)"; }
  echo "$hash" >"$stamp"
  step_times "$IMAGES/build-$kind.log" >"$IMAGES/build-$kind.steps"
  say "built $name in $((SECONDS - started))s; slowest steps ($IMAGES/build-$kind.steps):"
  head -n 4 "$IMAGES/build-$kind.steps" | sed 's/^/  /' >&2
}
build "$OPERATOR_IMAGE" images/operator/Dockerfile operator
build "$RUNTIME_IMAGE" Dockerfile runtime

# 4. what the retired process kubelet left in the store: its working containers (streamjob-rootfs-<image id>),
#    one unpacked image each. Unnamed images are kept: they are buildah's layer cache for the next build.
"${B[@]}" containers --noheading --format '{{.ContainerName}}' 2>/dev/null | { grep '^streamjob-rootfs-' || true; } \
  | while read -r container; do
      say "removing $container (a working container of the retired process kubelet)"
      "${B[@]}" rm "$container" >/dev/null 2>&1 || true
    done
echo "$IMAGES"
