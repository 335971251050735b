#!/usr/bin/env bash
# Everything hangar needs on a fresh machine: the venv, the control-plane binaries, the agent CLIs.
# Idempotent and quick when warm. Used by `make dev` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.hangar-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[dev]"
  touch "$stamp"
fi
for d in /usr/local/go/bin "$HOME/go/bin" /usr/lib/go/bin; do
  [ -x "$d/go" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH
if ! command -v go >/dev/null; then
  echo "Go is needed to build the control-plane binaries (or set KUBEBUILDER_ASSETS)" >&2
  [ -n "${KUBEBUILDER_ASSETS:-}" ] || exit 1
fi
[ -n "${KUBEBUILDER_ASSETS:-}" ] || .venv/bin/hangar dev binaries >/dev/null
if [ "${HANGAR_SKIP_CLIS:-}" != 1 ]; then
  bash tools/install-clis.sh >/dev/null
fi
