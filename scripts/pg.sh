#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests and benchmarks that need one.
#
#   scripts/pg.sh COMMAND [ARGS...]
#
# installs Debian's `postgresql` package when no server binaries are found,
# starts a server in a temporary directory on a free loopback port (as the
# unprivileged `postgres` user when run as root: the server refuses root),
# runs COMMAND with SUBTASK_TEST_PG set to its URL (and SUBTASK_TEST_PG_BIN,
# SUBTASK_TEST_PG_DATA for tests that restart it), then stops the server and
# removes the directory, whatever COMMAND's outcome. Exits with COMMAND's
# status; fails (never skips) when the server cannot be installed or started.
#
# Sourced (`. scripts/pg.sh`), it only defines `pg_start` and `pg_stop`.
set -euo pipefail

pg_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

pg_start() {
  local bindir
  bindir="$(pg_bindir)"
  if [[ -z "$bindir" || ! -x "$bindir/initdb" ]]; then
    echo "pg.sh: installing Debian's postgresql package" >&2
    if [[ "$(id -u)" -ne 0 ]]; then
      echo "pg.sh: PostgreSQL is not installed and this user cannot install it (run as root, or apt-get install postgresql)" >&2
      return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq postgresql >/dev/null
    bindir="$(pg_bindir)"
    if [[ -z "$bindir" ]]; then
      echo "pg.sh: postgresql installed but no server binaries under /usr/lib/postgresql" >&2
      return 1
    fi
  fi
  PG_DIR="$(mktemp -d /tmp/subtask-pg.XXXXXX)"
  local as=()
  if [[ "$(id -u)" -eq 0 ]]; then
    chown postgres:postgres "$PG_DIR"
    as=(runuser -u postgres --)
  fi
  PG_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  "${as[@]}" "$bindir/initdb" -D "$PG_DIR/data" -A trust -U postgres -E UTF8 >"$PG_DIR/initdb.log" 2>&1 || {
    cat "$PG_DIR/initdb.log" >&2
    return 1
  }
  "${as[@]}" "$bindir/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null || {
    cat "$PG_DIR/server.log" >&2
    return 1
  }
  export SUBTASK_TEST_PG="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  export SUBTASK_TEST_PG_BIN="$bindir"
  export SUBTASK_TEST_PG_DATA="$PG_DIR/data"
  export SUBTASK_TEST_PG_AS="${as[*]}"
  echo "pg.sh: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $SUBTASK_TEST_PG (data $PG_DIR)" >&2
}

pg_stop() {
  if [[ -n "${PG_DIR:-}" && -d "$PG_DIR" ]]; then
    local as=()
    [[ "$(id -u)" -eq 0 ]] && as=(runuser -u postgres --)
    "${as[@]}" "$(pg_bindir)/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_DIR"
  fi
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  if [[ $# -eq 0 ]]; then
    echo "usage: scripts/pg.sh COMMAND [ARGS...]" >&2
    exit 2
  fi
  trap pg_stop EXIT
  pg_start
  status=0
  "$@" || status=$?
  exit "$status"
fi
