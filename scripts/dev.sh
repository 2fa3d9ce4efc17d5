#!/usr/bin/env bash
# The README's first command: sets everything up, starts the local test bed
# (real kube-apiserver + etcd + controller-manager, an S3 server, a process
# kubelet) in the background, installs the operator with its Helm chart,
# applies the example StreamJobs, waits for one to run, and prints how to point
# kubectl at it. Stop it with: streamjob-testbed down
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .streamjob-env
streamjob-testbed up --operator \
  --apply examples/minimal.yaml --apply examples/s3-savepoints.yaml --apply examples/suspended.yaml "$@"
# shellcheck disable=SC1091
source .testbed/env
echo "dev: waiting for an example job to run" >&2
for _ in $(seq 1 60); do
  if kubectl get sj -A --no-headers 2>/dev/null | grep -q Running; then break; fi
  sleep 5
done
kubectl get sj -A
echo
echo "The test bed keeps running. Point kubectl at it with:"
echo "  source $ROOT/.testbed/env"
echo "then: kubectl get sj -A; kubectl describe sj minimal; streamjob-testbed down (to stop)"
