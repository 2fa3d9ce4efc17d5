#!/usr/bin/env bash
# The README's test command: sets everything up (first run builds and
# downloads into ~/.cache/streamjob), then runs the whole test suite against
# the real local test bed.
#
# The whole suite runs as two pytest processes side by side (docs/design/ci-runs.md):
#   - the bed's half (-m testbed): everything that needs the machine's one real
#     node, in the foreground;
#   - the local half (-m "not testbed"): unit, CRD, runtime (local Spark, its own
#     Kafka broker and S3 server on loopback), savepoints...; niced, so the bed's
#     control plane and kubelet come first; its output is printed when it ends.
# The run fails when either half fails. With arguments, one pytest runs them
# (extra arguments go to pytest); STREAMJOB_TEST_SERIAL=1 runs the whole suite
# in one pytest process, as before the halves.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [[ $# -gt 0 || "${STREAMJOB_TEST_SERIAL:-}" == 1 ]]; then
  bash scripts/bootstrap.sh
  # shellcheck disable=SC1091
  source .streamjob-env
  exec "$STREAMJOB_VENV/bin/pytest" -q -p no:cacheprovider --durations=0 --durations-min=15 "$@"
fi

# On a cold machine the tests start once the bed's own binaries are built; helm, Prometheus and the
# GitOps runners compile beside them (scripts/build-compiled.sh; the tests that use them wait)
STREAMJOB_DEFER_COMPILE=1 bash scripts/bootstrap.sh
echo "test.sh: bootstrap took ${SECONDS}s" >&2
# shellcheck disable=SC1091
source .streamjob-env
PYTEST=("$STREAMJOB_VENV/bin/pytest" -q -p no:cacheprovider --durations=0 --durations-min=15)

mkdir -p .testbed
local_log=".testbed/local-half.log"
started=$SECONDS
# its own process group: an interrupted run stops it with its brokers, S3 servers and JVMs
setsid nice -n 10 "${PYTEST[@]}" -m "not testbed and not slow" >"$local_log" 2>&1 &
local_pid=$!
trap 'kill -- "-$local_pid" 2>/dev/null || true' EXIT
echo "test.sh: the local half (-m 'not testbed') runs beside this one; its output: $local_log" >&2

bed_rc=0
"${PYTEST[@]}" -m "testbed and not slow" || bed_rc=$?
bed_seconds=$((SECONDS - started))
local_rc=0
wait "$local_pid" || local_rc=$?
trap - EXIT
flock "$STREAMJOB_CACHE/.compile.lock" true  # the compilation left for later is over (the tests waited for it)
if [[ -s "$STREAMJOB_CACHE/build-compiled.log" ]]; then
  echo "=== compiled beside the tests (scripts/build-compiled.sh) ==="
  cat "$STREAMJOB_CACHE/build-compiled.log"
fi
echo
echo "=== the local half (-m 'not testbed'), run beside the bed's ==="
cat "$local_log"
echo
echo "test.sh: the bed's half exited $bed_rc after ${bed_seconds}s; the local half exited $local_rc; both done after $((SECONDS - started))s"
[[ $bed_rc -eq 0 && $local_rc -eq 0 ]]
