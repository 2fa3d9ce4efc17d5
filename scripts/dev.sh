#!/usr/bin/env bash
# The README's first command: sets everything up, starts the local test bed
# (real kube-apiserver + etcd + controller-manager, an S3 server, a Kafka
# broker, a real node: containerd, kubelet, CNI, kube-proxy, scheduler, CoreDNS) in the
# background, installs the operator with its Helm chart (a pod of the built image),
# produces the Kafka example's input, applies every examples/*.yaml, waits until every
# StreamJob that should run is Ready (a committed batch: .status.ready == true), and
# prints how to point kubectl at it. If one never gets there within DEV_READY_TIMEOUT
# seconds (default 300), it prints what is wrong (conditions, last events) and exits 1;
# the test bed keeps running so it can be inspected. Stop it with:
# streamjob-testbed down
# tests/e2e/test_examples.py runs this very script on every test run (with
# STREAMJOB_TESTBED_DIR pointing at a folder of its own).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
READY_TIMEOUT="${DEV_READY_TIMEOUT:-300}"
TESTBED_DIR="${STREAMJOB_TESTBED_DIR:-$ROOT/.testbed}"
bash scripts/bootstrap.sh
# shellcheck disable=SC1091
source .streamjob-env
streamjob-testbed up --operator --kafka "$@"
# shellcheck disable=SC1091
source "$TESTBED_DIR/env"
# examples/kafka.yaml names the kafka Service's port 9093: a test bed that had to take another cannot run it
kafka_for_pods="kafka.streamjob-testbed.svc.cluster.local:9093"
if [[ "${STREAMJOB_KAFKA_BOOTSTRAP_FOR_PODS:-}" != "$kafka_for_pods" ]]; then
  echo "dev: pods reach Kafka at ${STREAMJOB_KAFKA_BOOTSTRAP_FOR_PODS:-(none)}, but examples/kafka.yaml names" \
    "$kafka_for_pods (another program holds port 9093: ss -ltnp 'sport = :9093');" \
    "free it and run again (streamjob-testbed down first)" >&2
  exit 1
fi
# the Kafka example's input (examples/kafka.yaml: Kafka -> windows -> Kafka, exactly once)
python examples/jobs/kafka_events.py "$STREAMJOB_KAFKA_BOOTSTRAP" events --count 600 >/dev/null
# every example: a new file in examples/ is applied (and so tested) with no change here
kubectl apply -f examples/

# "namespace/name" of every StreamJob that should run (spec.state is not
# suspended) and has not committed a batch yet.
not_ready() {
  kubectl get sj -A --no-headers \
    -o custom-columns='NS:.metadata.namespace,NAME:.metadata.name,STATE:.spec.state,READY:.status.ready' |
    awk '$3 != "suspended" && $4 != "true" { print $1 "/" $2 }'
}

explain() {
  local job="$1" ns name
  ns="${job%%/*}" name="${job#*/}"
  echo "--- $job: conditions" >&2
  kubectl get sj "$name" -n "$ns" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' >&2 || true
  echo "--- $job: last error: $(kubectl get sj "$name" -n "$ns" -o jsonpath='{.status.lastError}' 2>/dev/null || true)" >&2
  echo "--- $job: last events" >&2
  kubectl get events -n "$ns" --field-selector "involvedObject.name=$name" --sort-by=.lastTimestamp 2>&1 | tail -n 10 >&2 || true
}

echo "dev: waiting up to ${READY_TIMEOUT}s for the example jobs to be Ready (a committed batch)" >&2
deadline=$((SECONDS + READY_TIMEOUT))
waiting="$(not_ready)" || waiting="(kubectl get sj failed)"
while [[ -n "$waiting" ]] && (( SECONDS < deadline )); do
  sleep 5
  waiting="$(not_ready)" || waiting="(kubectl get sj failed)"
done
kubectl get sj -A
if [[ -n "$waiting" ]]; then
  echo >&2
  echo "dev: not Ready after ${READY_TIMEOUT}s: $(echo "$waiting" | tr '\n' ' ')" >&2
  while read -r job; do
    [[ "$job" == */* ]] && explain "$job"
  done <<< "$waiting"
  echo >&2
  echo "dev: the test bed keeps running: source $TESTBED_DIR/env, then kubectl describe sj NAME;" \
    "logs under $TESTBED_DIR/run; streamjob-testbed down to stop" >&2
  exit 1
fi
echo
echo "The test bed keeps running. Point kubectl at it with:"
echo "  source $TESTBED_DIR/env"
echo "then: kubectl get sj -A; kubectl describe sj minimal; streamjob-testbed down (to stop)"
echo "Kafka example (docs/delivery.md): broker at \$STREAMJOB_KAFKA_BOOTSTRAP; the job kafka-windows"
echo "  writes closed windows to topic 'windows' (read with isolation.level=read_committed)"
echo "The kubectl plugin is on that PATH (docs/kubectl-plugin.md):"
echo "  kubectl streamjob list -A; kubectl streamjob status minimal; kubectl streamjob savepoint NAME --wait"
echo
echo "Metrics (docs/observability.md): the operator serves Prometheus metrics at"
echo "  http://$(kubectl get pod -n streamjob-system -l app.kubernetes.io/name=streamjob-operator -o jsonpath='{.items[0].status.podIP}' 2>/dev/null || echo POD_IP):9090/metrics"
echo "  (in a cluster: the Service streamjob-streamjob-metrics, port 9090; the Grafana dashboard is charts/streamjob/dashboards/streamjob.json)"
