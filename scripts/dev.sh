#!/usr/bin/env bash
# The README's first command: sets everything up, starts the local test bed
# (real kube-apiserver + etcd + controller-manager, an S3 server, a process
# kubelet) and the operator, applies the example StreamJobs, and prints how to
# point kubectl at it. Ctrl-C stops everything.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .streamjob-env
exec "$STREAMJOB_VENV/bin/streamjob-testbed" up --operator --apply examples/minimal.yaml --apply examples/s3-savepoints.yaml --apply examples/suspended.yaml "$@"
