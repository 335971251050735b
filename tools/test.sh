#!/usr/bin/env bash
# The test command: sets up what it needs (cold: ~10 minutes; warm: seconds), runs the checks and the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
# The TypeScript MCP SDK's client for tests/e2e/test_mcp_ts_client_e2e.py, as its package-lock.json pins it.
ts=tests/clients/mcp-ts
if [ ! "$ts/node_modules/.package-lock.json" -nt "$ts/package-lock.json" ]; then
  npm ci --prefix "$ts" --no-audit --no-fund --loglevel=error >/dev/null
fi
echo "== lint and types"
ruff check .                # sandbox-image/ by its own pyproject.toml: a py38 target
ruff format --check .
mypy
mypy --config-file sandbox-image/pyproject.toml   # the sandbox driver, strict
hangar crds --check
vermin -q -t=3.8- --no-tips --violations sandbox-image/ >/dev/null || {
  vermin -t=3.8- --no-tips --violations sandbox-image/; exit 1; }
echo "== tests"
read -r PG_URL PG_DIR < <(bash tools/postgres.sh)
trap 'bash tools/postgres.sh stop "$PG_DIR"' EXIT
export HANGAR_TEST_POSTGRES_URL="$PG_URL"
# Two workers (HANGAR_TEST_WORKERS; 0 runs in this process): most e2e time is waiting on processes, so
# two files at once nearly halve the tier on 2 cores. A file stays on one worker (its module fixtures:
# stacks, namespaces, a model server, are made once); each worker has its own control plane and stack.
workers=${HANGAR_TEST_WORKERS:-2}
python -m pytest -q -p no:cacheprovider --durations=25 -n "$workers" --dist loadfile "$@"
