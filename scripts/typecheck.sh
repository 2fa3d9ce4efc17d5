#!/usr/bin/env bash
# mypy --strict over the product's packages under their installed names: the contract,
# the operator, the job runtime and the kubectl plugin (pyproject.toml [tool.mypy] for
# the rest). Called by tests/unit/test_static.py and .pre-commit-config.yaml; uses the
# mypy on PATH. The folders are not named as their packages (operator/ is
# streamjob_operator), so mypy reads them through symlinks under .mypy_cache/roots;
# its cache beside them stays warm, so a second run takes seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
roots="$ROOT/.mypy_cache/roots"
mkdir -p "$roots"
for pair in streamjob_contract:contract streamjob_operator:operator job_runtime:job_runtime streamjob_cli:cli; do
  ln -sfn "$ROOT/${pair#*:}" "$roots/${pair%%:*}"
done
cd "$roots"
export MYPYPATH="$roots"
exec mypy --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache/strict" --strict \
  -p streamjob_contract -p streamjob_operator -p job_runtime -p streamjob_cli "$@"
