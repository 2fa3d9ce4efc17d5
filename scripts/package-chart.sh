#!/usr/bin/env bash
# Packages charts/streamjob into a Helm repository folder: lints the chart,
# writes streamjob-<version>.tgz and index.yaml (merged with an index already
# there, so older versions stay listed). Serve the folder as a Helm repository
# (any static web server, an S3 bucket, GitHub Pages) or push the .tgz to an
# OCI registry. Installs nothing.
#
#   bash scripts/package-chart.sh [OUT_DIR] [REPO_URL]
#     OUT_DIR   where the .tgz and index.yaml go (default: dist/charts)
#     REPO_URL  the URL the folder will be served at, written into index.yaml
#               (default: https://streamjob.github.io/charts)
#   HELM=/path/to/helm to use another helm than the one on PATH.
#
# Then either
#   helm repo add streamjob REPO_URL && helm install streamjob streamjob/streamjob -n streamjob-system --create-namespace
# or, as an OCI artifact (Helm 3.8+):
#   helm registry login registry.example.com
#   helm push OUT_DIR/streamjob-<version>.tgz oci://registry.example.com/team/charts
#   helm install streamjob oci://registry.example.com/team/charts/streamjob --version <version> -n streamjob-system --create-namespace
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="$repo/charts/streamjob"
out="${1:-$repo/dist/charts}"
url="${2:-https://streamjob.github.io/charts}"
helm="${HELM:-helm}"

if ! command -v "$helm" >/dev/null 2>&1; then
  echo "package-chart: helm not found (set HELM=/path/to/helm, or source .streamjob-env for the test bed's)" >&2
  exit 2
fi

mkdir -p "$out"
"$helm" lint "$chart" >/dev/null
package="$("$helm" package "$chart" --destination "$out")"
tgz="${package##*: }"  # "Successfully packaged chart and saved it to: <path>"
if [[ -f "$out/index.yaml" ]]; then
  "$helm" repo index "$out" --url "$url" --merge "$out/index.yaml"
else
  "$helm" repo index "$out" --url "$url"
fi
echo "package-chart: $tgz"
echo "package-chart: $out/index.yaml (url $url)"
echo "package-chart: push as OCI with: $helm push $tgz oci://<registry>/<path>"
