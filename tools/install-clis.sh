#!/usr/bin/env bash
# Install the pinned coding-agent CLIs (Claude Code, Codex, pi) with npm into one directory.
#
#   tools/install-clis.sh [DIR]
#
# DIR defaults to /var/cache/hangar/clis when run as root (the agent runs under another uid, so the tree is made
# world-readable and -traversable), else ${XDG_CACHE_HOME:-$HOME/.cache}/hangar/clis. Idempotent: a stamp file
# records the pinned set; when it matches and the binaries are there, nothing is downloaded (~1 GB otherwise).
# Prints the bin dir (DIR/node_modules/.bin) as its last line.
set -euo pipefail

PACKAGES=(
  "@anthropic-ai/claude-code@2.1.332"
  "@openai/codex@0.171.0"
  "@mariozechner/pi-coding-agent@0.73.1"
)

default_root_dir="/var/cache/hangar/clis"
if [[ $# -ge 1 && -n "$1" ]]; then
  dir="$1"
elif [[ "$(id -u)" == "0" ]]; then
  dir="$default_root_dir"
else
  dir="${XDG_CACHE_HOME:-$HOME/.cache}/hangar/clis"
fi

command -v npm >/dev/null 2>&1 || {
  echo "install-clis: npm not found (node >= 20 is needed)" >&2
  exit 1
}

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
bin="$dir/node_modules/.bin"

# One install at a time into the same directory (CI and `hangar dev` may both call this).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.hangar-clis.lock"
  flock 9
fi
stamp="$dir/.hangar-clis.stamp"
want="$(printf '%s\n' "${PACKAGES[@]}")"

have_all() {
  [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$want" ]] || return 1
  local b
  for b in claude codex pi; do
    [[ -x "$bin/$b" ]] || return 1
  done
}

if have_all; then
  echo "install-clis: already installed in $dir" >&2
else
  echo "install-clis: installing ${PACKAGES[*]} into $dir" >&2
  rm -f "$stamp"
  # A package.json of our own keeps npm from walking up into an unrelated project.
  [[ -f "$dir/package.json" ]] || printf '{"name":"hangar-clis","private":true}\n' >"$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "${PACKAGES[@]}" >&2
  for b in claude codex pi; do
    [[ -x "$bin/$b" ]] || {
      echo "install-clis: $bin/$b missing after npm install" >&2
      exit 1
    }
  done
  printf '%s\n' "$want" >"$stamp"
fi

# Readable and traversable by every uid (the agent runs as another user); executables stay executable.
chmod o+rx,g+rx "$dir"
chmod -R o+rX,g+rX "$dir/node_modules"
chmod o+r,g+r "$dir/package.json" "$stamp" 2>/dev/null || true
# Every parent must be traversable too. Fix that for the default location only; elsewhere, say so.
p="$(dirname "$dir")"
while [[ "$p" != "/" ]]; do
  if ! [[ "$(stat -c %A "$p")" =~ ^d........[xt] ]]; then
    if [[ "$dir" == "$default_root_dir" ]]; then
      chmod o+x "$p"
    else
      echo "install-clis: warning: $p is not traversable by other users; an agent running as another uid cannot reach $dir" >&2
    fi
  fi
  p="$(dirname "$p")"
done

echo "$bin"
