#!/usr/bin/env bash
# The README's test command: sets everything up (first run builds and
# downloads into ~/.cache/streamjob), then runs the whole test suite against
# the real local test bed. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
echo "test.sh: bootstrap took ${SECONDS}s" >&2
# shellcheck disable=SC1091
source .streamjob-env
exec "$STREAMJOB_VENV/bin/pytest" -q -p no:cacheprovider --durations=0 --durations-min=15 "$@"
