#!/usr/bin/env bash
# Starts a throw-away PostgreSQL on a free loopback port for the tests and prints its URL.
# Installs Debian's server when missing. `tools/postgres.sh stop DIR` stops it.
set -euo pipefail
if [ "${1:-}" = stop ]; then
  dir=$2; [ -d "$dir" ] || exit 0
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "pg_ctl -D '$dir/data' -m immediate stop" >/dev/null 2>&1 || true
  else pg_ctl -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; fi
  rm -rf "$dir"; exit 0
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) >&2
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  else
    echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1
  fi
fi
export PATH="$PGBIN:$PATH"
dir=$(mktemp -d /tmp/hangar-pg-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "PATH=$PGBIN:\$PATH $*"; else sh -c "$*"; fi; }
if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; fi
chmod 755 "$dir"
run "initdb -D '$dir/data' -A trust -U hangar >/dev/null"
run "pg_ctl -D '$dir/data' -l '$dir/log' -o \"-h 127.0.0.1 -p $port -k '$dir' -F\" -w start >/dev/null"
run "createdb -h 127.0.0.1 -p $port -U hangar hangar"
echo "postgresql://hangar@127.0.0.1:$port/hangar $dir"
