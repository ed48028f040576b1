#!/usr/bin/env bash
# The browser tests of the web view: headless Chromium, driven by Playwright
# (playwright-core), against a real `subtask serve` with two principals, then
# against a cluster of two instances on one PostgreSQL database.
#
#   scripts/ui.sh
#
# Installs what it needs and fails when it cannot (it never skips):
#   - Debian's `chromium` (apt-get), used as /usr/bin/chromium;
#   - `playwright-core`, pinned in tests/ui/package.json (+ package-lock.json),
#     into $CACHE/node with the machine's npm (a stamp of the pin files decides
#     whether to reinstall); tests/ui/node_modules is made a symlink to it so
#     the ESM test resolves its import.
#   - a PostgreSQL server: the one SUBTASK_TEST_PG names (scripts/test.sh
#     starts one before), else a throwaway one from scripts/pg.sh (which
#     installs Debian's postgresql when needed, or fails).
# Then builds target/debug/subtask, starts `subtask serve --memory --tokens`
# on a free loopback port with tokens for `alice` and `bob`, and runs
# tests/ui/ui.mjs; then starts two instances, A and B, `subtask serve --db
# postgres://…` on a new database of that server with the same tokens, and
# runs tests/ui/cluster.mjs (a tree created on A, opened, followed and
# paused in the page served by B; the list paged to the oldest tree). Each
# prints `ok <check>` / `FAIL <check>: <reason>` lines and saves screenshots
# to $SHOTS (default target/ui-screenshots; cluster-*.png from the second):
# look at them.
#
# Environment:
#   UI_CACHE    install directory (default $REPO/.cache/ui)
#   UI_SHOTS    screenshot directory (default $REPO/target/ui-screenshots)
#   UI_TIMEOUT_S  timeout of the browser test in seconds (default 300)
#
# Exit status: 0 when every check passed, 1 otherwise.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${UI_CACHE:-$REPO/.cache/ui}"
SHOTS="${UI_SHOTS:-$REPO/target/ui-screenshots}"
TIMEOUT_S="${UI_TIMEOUT_S:-300}"
DIR="$REPO/tests/ui"
NODE_DIR="$CACHE/node"
CHROMIUM=/usr/bin/chromium
SERVER_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/subtask"

fail() {
  echo "ui.sh: $*" >&2
  exit 1
}

# ---------------------------------------------------------------- install
if [[ ! -x "$CHROMIUM" ]]; then
  echo "== installing Debian's chromium (apt-get)" >&2
  command -v apt-get >/dev/null || fail "apt-get is not available to install chromium"
  SUDO=""
  [[ "$(id -u)" == 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq >&2 || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >&2 || fail "apt-get install chromium failed"
fi
[[ -x "$CHROMIUM" ]] || fail "$CHROMIUM is missing after installing chromium"
"$CHROMIUM" --version >&2 || fail "$CHROMIUM does not run"

command -v node >/dev/null || fail "node is not installed (needed to run Playwright)"
command -v npm >/dev/null || fail "npm is not installed (needed once, to install playwright-core into $NODE_DIR)"
stamp="$(cat "$DIR/package.json" "$DIR/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$NODE_DIR/.stamp" || "$(cat "$NODE_DIR/.stamp")" != "$stamp" || ! -d "$NODE_DIR/node_modules/playwright-core" ]]; then
  echo "== installing tests/ui/package.json (playwright-core) into $NODE_DIR" >&2
  rm -rf "$NODE_DIR"
  mkdir -p "$NODE_DIR"
  cp "$DIR/package.json" "$DIR/package-lock.json" "$NODE_DIR/"
  npm ci --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error >&2 || fail "npm ci of playwright-core into $NODE_DIR failed"
  echo "$stamp" >"$NODE_DIR/.stamp"
fi
ln -sfn "$NODE_DIR/node_modules" "$DIR/node_modules"

# ---------------------------------------------------------------- server
echo "== cargo build --bin subtask" >&2
(cd "$REPO" && cargo build --bin subtask >&2) || fail "cargo build --bin subtask failed"

WORK="$(mktemp -d)"
PIDS=()
DB_NAME=""
PSQL=""
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "$DB_NAME" && -n "$PSQL" ]]; then
    "$PSQL" -q "$SUBTASK_TEST_PG" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" >/dev/null 2>&1 || true
  fi
  [[ "${OWN_PG:-}" == 1 ]] && pg_stop
  rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN_A="ui-alice-$RANDOM$RANDOM"
TOKEN_B="ui-bob-$RANDOM$RANDOM"
printf '%s alice\n%s bob\n' "$TOKEN_A" "$TOKEN_B" >"$WORK/tokens"

# start_server NAME ARGS...: `subtask serve ARGS` on a free loopback port,
# logging to $WORK/NAME.log; sets ADDR to its address once it listens.
start_server() {
  local name="$1"
  shift
  "$SERVER_BIN" serve --listen 127.0.0.1:0 --tokens "$WORK/tokens" "$@" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  ADDR=""
  for _ in $(seq 1 300); do
    ADDR="$(grep -o 'listening on http://[0-9.:]*' "$WORK/$name.log" | head -1 | sed 's|listening on http://||' || true)"
    [[ -n "$ADDR" ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$WORK/$name.log" >&2; fail "the server $name exited at start"; }
    sleep 0.1
  done
  [[ -n "$ADDR" ]] || { cat "$WORK/$name.log" >&2; fail "the server $name did not start listening"; }
}

# run_browser NAME SCRIPT LOGS...: runs tests/ui/SCRIPT with the environment
# set by the caller; on failure prints the servers' logs and fails.
run_browser() {
  local name="$1" script="$2"
  shift 2
  echo "== tests/ui/$script (screenshots in $SHOTS)" >&2
  set +e
  SHOTS="$SHOTS" CHROMIUM="$CHROMIUM" TOKEN_A="$TOKEN_A" TOKEN_B="$TOKEN_B" \
    timeout "$TIMEOUT_S" node "$DIR/$script"
  local status=$?
  set -e
  if [[ $status -ne 0 ]]; then
    for log in "$@"; do
      echo "---- $log (last 40 lines)" >&2
      tail -40 "$WORK/$log.log" >&2
    done
    [[ $status -eq 124 ]] && fail "the $name browser test timed out after ${TIMEOUT_S}s"
    fail "the $name browser test failed"
  fi
}

mkdir -p "$SHOTS"
rm -f "$SHOTS"/*.png

# ---------------------------------------------------------------- one instance
start_server server --memory
export SUBTASK_BASE="http://$ADDR"
run_browser "single-instance" ui.mjs server
echo "ui.sh: the browser test of one instance passed" >&2

# ---------------------------------------------------------------- a cluster
if [[ -z "${SUBTASK_TEST_PG:-}" ]]; then
  echo "== no SUBTASK_TEST_PG: starting a throwaway PostgreSQL (scripts/pg.sh)" >&2
  # shellcheck source=scripts/pg.sh
  . "$REPO/scripts/pg.sh"
  OWN_PG=1
  pg_start || fail "no PostgreSQL server for the cluster test (scripts/pg.sh could not start one)"
fi
PSQL="${SUBTASK_TEST_PG_BIN:-}/psql"
[[ -x "$PSQL" ]] || PSQL="$(command -v psql || true)"
[[ -n "$PSQL" && -x "$PSQL" ]] || fail "psql is not installed (needed to make the cluster test's database)"
DB_NAME="subtask_ui_cluster_$$_$RANDOM"
"$PSQL" -q "$SUBTASK_TEST_PG" -c "CREATE DATABASE $DB_NAME" >/dev/null ||
  fail "cannot create a database on the PostgreSQL server at $SUBTASK_TEST_PG"
DB_URL="${SUBTASK_TEST_PG%/*}/$DB_NAME"
start_server a --db "$DB_URL"
export BASE_A="http://$ADDR"
start_server b --db "$DB_URL"
export BASE_B="http://$ADDR"
run_browser "cluster" cluster.mjs a b
echo "ui.sh: the browser tests passed; screenshots in $SHOTS" >&2
