#!/usr/bin/env bash
# The README's test command: sets everything up (first run builds and
# downloads into ~/.cache/streamjob), then runs the whole test suite against
# the real local test bed.
#
# The whole suite runs as two pytest processes side by side (docs/design/ci-runs.md):
#   - the bed's half (-m testbed): everything that needs the machine's one real
#     node, in the foreground;
#   - the local half (-m "not testbed"): unit, CRD, runtime (local Spark, its own
#     Kafka broker and S3 server on loopback), savepoints...; started as soon as
#     what it needs is set up, while the bootstrap still compiles the control plane
#     and the node; niced, so the compilation and then the bed's control plane and
#     kubelet come first; its output is printed when it ends.
# The run fails when either half fails. With arguments, one pytest runs them
# (extra arguments go to pytest); STREAMJOB_TEST_SERIAL=1 runs the whole suite
# in one pytest process, as before the halves.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTEST_ARGS=(-q -p no:cacheprovider --durations=0 --durations-min=15)

if [[ $# -gt 0 || "${STREAMJOB_TEST_SERIAL:-}" == 1 ]]; then
  bash scripts/bootstrap.sh
  # shellcheck disable=SC1091
  source .streamjob-env
  exec "$STREAMJOB_VENV/bin/pytest" "${PYTEST_ARGS[@]}" "$@"
fi

# The local half starts as soon as what it needs is there (bootstrap's step 4b: the virtualenv,
# jars, broker, S3 server, helm, promtool, GitOps runners), while the control plane, the node and
# the images are still being built: on a fresh machine that is most of the bootstrap.
mkdir -p .testbed
local_env="$ROOT/.testbed/local-half.env"
local_log=".testbed/local-half.log"
STREAMJOB_LOCAL_ENV="$local_env" bash scripts/bootstrap.sh &
boot_pid=$!
trap 'kill "$boot_pid" 2>/dev/null || true' EXIT
while [[ ! -f "$local_env" ]] && [[ "$(ps -o stat= -p "$boot_pid" 2>/dev/null)" == [^Z]* ]]; do sleep 1; done
if [[ ! -f "$local_env" ]]; then
  wait "$boot_pid" || exit $?
  echo "test.sh: bootstrap ended without the local half's environment ($local_env)" >&2
  exit 1
fi
started=$SECONDS
# its own process group: an interrupted run stops it with its brokers, S3 servers and JVMs;
# niced, so the compilation and then the bed's control plane and kubelet come first
(
  # shellcheck disable=SC1090
  source "$local_env"
  exec setsid nice -n 10 "$STREAMJOB_VENV/bin/pytest" "${PYTEST_ARGS[@]}" -m "not testbed and not slow"
) >"$local_log" 2>&1 &
local_pid=$!
trap 'kill "$boot_pid" 2>/dev/null; kill -- "-$local_pid" 2>/dev/null || true' EXIT
echo "test.sh: the local half (-m 'not testbed') started after ${SECONDS}s and runs beside the rest; its output: $local_log" >&2

boot_rc=0
wait "$boot_pid" || boot_rc=$?
if [[ $boot_rc -ne 0 ]]; then
  echo "test.sh: bootstrap failed ($boot_rc): the local half is stopped" >&2
  exit "$boot_rc"
fi
echo "test.sh: bootstrap took ${SECONDS}s" >&2
# shellcheck disable=SC1091
source .streamjob-env
PYTEST=("$STREAMJOB_VENV/bin/pytest" "${PYTEST_ARGS[@]}")

bed_rc=0
bed_started=$SECONDS
"${PYTEST[@]}" -m "testbed and not slow" || bed_rc=$?
bed_seconds=$((SECONDS - bed_started))
local_rc=0
wait "$local_pid" || local_rc=$?
trap - EXIT
echo
echo "=== the local half (-m 'not testbed'), run beside the bed's ==="
cat "$local_log"
echo
echo "test.sh: the bed's half exited $bed_rc after ${bed_seconds}s; the local half exited $local_rc; both done ${SECONDS}s after the start, $((SECONDS - started))s after the local half's"
[[ $bed_rc -eq 0 && $local_rc -eq 0 ]]
