#!/usr/bin/env bash
# Sets up everything the project needs on a fresh machine, into a cache keyed
# by version outside the clone (so CI and later runs reuse it):
#   - a Python virtualenv with the project and its test extras, and the test bed
#     (its own distribution, testbed/pyproject.toml: never in the product),
#   - the test bed's Go binaries (kube-apiserver, kube-controller-manager,
#     kubectl, etcd, versitygw, helm), built from their official Go modules,
#   - the GitOps consumers the tests use (gopher-lua health runner, kstatus),
#   - the real node's binaries (containerd, kubelet, kube-proxy, kube-scheduler, CoreDNS,
#     CNI plugins, pause; runc from Debian) and its pause and busybox images,
#   - the Maven jars Spark needs for s3a:// (hadoop-aws + AWS SDK bundle) and
#     for Kafka (Spark's connector, images/runtime/kafka-jars.txt),
#   - the Apache Kafka broker jars the test bed runs (kafka_2.13 + dependencies),
#   - the runtime and operator images, built with buildah from images/*/Dockerfile
#     (scripts/build-images.sh; rebuilt only when their inputs change).
# Prints nothing but progress on stderr; writes the paths to .streamjob-env.
# Used by the README's commands and by .ci/run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_ROOT="${STREAMJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamjob}"
export STREAMJOB_CACHE="$CACHE_ROOT"
mkdir -p "$CACHE_ROOT"

say() { echo "bootstrap: $*" >&2; }
step_started=$SECONDS
took() {  # what: says how long the step since the last call took (a cold run's breakdown: docs/design/ci-runs.md)
  say "$1: $((SECONDS - step_started))s"
  step_started=$SECONDS
}
die() { echo "bootstrap: error: $*" >&2; exit 1; }

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || die "python3 (3.11+) is not installed: apt-get install python3 python3-venv"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || die "Python 3.11+ is required, found $("$PY" --version)"
command -v java >/dev/null || die "Java 17 is not installed (Spark needs it): apt-get install openjdk-17-jre-headless"
command -v go >/dev/null || die "Go >= 1.26 is not installed (the test bed builds kube-apiserver with it)"
command -v mvn >/dev/null || die "Maven is not installed (it fetches hadoop-aws for s3a://): apt-get install maven"

# Two runs at once (a developer's and CI's) share the cache: one builds, the other waits.
exec 9>"$CACHE_ROOT/.bootstrap.lock"
flock 9

# 0. the images' base (debootstrap: downloads and dpkg, ~2.5 min cold) starts
#    now, in the background, beside the virtualenv; the images follow in step 3
#    (build-images.sh takes a lock: that run waits for this one)
setsid bash "$ROOT/scripts/build-images.sh" --base-only >/dev/null 2>"$CACHE_ROOT/build-images-base.log" &
base_pid=$!
trap 'kill -- "-$base_pid" 2>/dev/null || true' EXIT

# 0b. everything compiled from Go modules (the control plane, etcd, the S3 server, the node; then helm,
#     Prometheus, the GitOps runners) starts now too, in the background: compilation takes the CPU, while the
#     virtualenv, the jars and the Kafka broker below are mostly downloads. Its folders come back as shell
#     assignments in $compile_out; its progress goes to stderr as it happens, between the other steps' lines.
#     With STREAMJOB_DEFER_COMPILE=1 (scripts/test.sh) the assignments come once the bed's own binaries are
#     built, this script returns then, and helm, Prometheus and the GitOps runners go on compiling beside the
#     tests (the tests that use them wait: testbed/locate.py's await_compiled; the log:
#     $CACHE_ROOT/build-compiled.log). It does not keep this script's lock (fd 9).
compile_out="$CACHE_ROOT/build-compiled.out"
rm -f "$compile_out"
if [[ "${STREAMJOB_DEFER_COMPILE:-}" == 1 ]]; then
  setsid bash "$ROOT/scripts/build-compiled.sh" "$compile_out" 9>&- &
else
  setsid bash "$ROOT/scripts/build-compiled.sh" >"$compile_out" 9>&- &
fi
compile_pid=$!
trap 'kill -- "-$base_pid" "-$compile_pid" 2>/dev/null || true' EXIT

# 1. virtualenv, keyed by the Python version and the dependency lists (not by the
#    rest of pyproject.toml: a new subpackage or tool setting needs no new venv)
deps_key=$("$PY" - "$ROOT/pyproject.toml" "$ROOT/testbed/pyproject.toml" <<'PYKEY'
import hashlib, json, sys, tomllib
product, testbed = (tomllib.load(open(path, "rb"))["project"] for path in sys.argv[1:3])
deps = {"dependencies": product.get("dependencies", []), "optional": product.get("optional-dependencies", {}),
        "testbed": testbed.get("dependencies", [])}
print(hashlib.sha256(json.dumps(deps, sort_keys=True).encode()).hexdigest()[:12])
PYKEY
)
VENV="$CACHE_ROOT/venv-py$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')-$deps_key"
# which clone the editable installs point at, and with which package lists and scripts
editable_key=$(cat <(echo "$ROOT") "$ROOT/pyproject.toml" "$ROOT/testbed/pyproject.toml" | sha256sum | cut -c1-16)
if [[ ! -x "$VENV/bin/python" || ! -f "$VENV/.complete" ]]; then
  say "creating virtualenv $VENV (first run only)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade "pip>=24" >&2
  "$VENV/bin/pip" install -q -e "$ROOT[test]" >&2 || die "pip install failed (see above)"
  "$VENV/bin/pip" install -q -e "$ROOT/testbed" >&2 || die "pip install of the test bed failed (see above)"
  touch "$VENV/.complete"
  echo "$editable_key" > "$VENV/.editable"
elif [[ "$(cat "$VENV/.editable" 2>/dev/null)" == "$editable_key" ]]; then
  # already this clone's: nothing is reinstalled, so a run that bootstraps again (dev.sh inside the tests)
  # never leaves the packages missing for a moment under processes that are starting beside it
  :
else
  # the venv is shared by clones: point its editable installs at this one (the
  # product first: a venv from before the test bed had its own distribution
  # lists streamjob-testbed among the product's scripts, removed with it)
  "$VENV/bin/pip" install -q --no-deps -e "$ROOT" >&2 || die "pip install -e failed"
  "$VENV/bin/pip" install -q --no-deps -e "$ROOT/testbed" >&2 || die "pip install -e testbed failed"
  echo "$editable_key" > "$VENV/.editable"
fi
took "virtualenv"

# 2. jars for s3a:// and Kafka (the image build below reuses Maven's repository)
JARS_DIR=$(bash "$ROOT/testbed/build/fetch-jars.sh" "$VENV")
took "jars"

# 3. the container images (the test bed's kubelet runs them: docs/images.md),
#    built in the background while the Go binaries build (0b): the image build is
#    mostly downloads, package unpacking and layer writes, the Go builds are
#    compilation, so on a cold run the two overlap well even on 2 cores
images_out="$CACHE_ROOT/build-images.out"
setsid bash "$ROOT/scripts/build-images.sh" >"$images_out" 2>"$images_out.log" &
images_pid=$!  # its own process group: stopped with it (buildah included) if bootstrap fails first
trap 'kill -- "-$base_pid" "-$compile_pid" "-$images_pid" 2>/dev/null || true' EXIT

# 4. the Kafka broker (KRaft) the test bed runs
KAFKA_DIR=$(bash "$ROOT/testbed/build/fetch-kafka.sh")
took "kafka"

# 5. wait for the compiled binaries (step 0b): all of them, or with STREAMJOB_DEFER_COMPILE=1 the bed's own
if [[ "${STREAMJOB_DEFER_COMPILE:-}" == 1 ]]; then
  while [[ ! -s $compile_out ]] && kill -0 "$compile_pid" 2>/dev/null; do sleep 1; done
  [[ -s $compile_out ]] || { wait "$compile_pid" || true; die "building the Go binaries failed (testbed/build/build-*.sh; output above)"; }
else
  wait "$compile_pid" || die "building the Go binaries failed (testbed/build/build-*.sh; output above)"
fi
# shellcheck disable=SC1090
source "$compile_out"
took "waiting for the compiled binaries"

# 6. wait for the images
if ! wait "$images_pid"; then
  cat "$CACHE_ROOT/build-images-base.log" "$images_out.log" >&2
  die "building the images failed (scripts/build-images.sh; output above)"
fi
trap - EXIT
cat "$CACHE_ROOT/build-images-base.log" "$images_out.log" >&2
IMAGES_DIR=$(cat "$images_out")
took "waiting for the images"

cat > "$ROOT/.streamjob-env" <<ENV
export STREAMJOB_CACHE="$CACHE_ROOT"
export STREAMJOB_VENV="$VENV"
export STREAMJOB_BIN_DIR="$BIN_DIR"
export STREAMJOB_PROMETHEUS_BIN_DIR="$PROMETHEUS_BIN_DIR"
export STREAMJOB_JARS_DIR="$JARS_DIR"
export STREAMJOB_KAFKA_DIR="$KAFKA_DIR"
export STREAMJOB_GITOPS_BIN_DIR="$GITOPS_BIN_DIR"
export STREAMJOB_NODE_BIN_DIR="$NODE_BIN_DIR"
export STREAMJOB_IMAGES_DIR="$IMAGES_DIR"
export PATH="$BIN_DIR:$GITOPS_BIN_DIR:$PROMETHEUS_BIN_DIR:$VENV/bin:\$PATH"
ENV
say "ready: source .streamjob-env to use the tools"
