#!/usr/bin/env bash
# The browser test of the web view: headless Chromium, driven by Playwright
# (playwright-core), against a real `subtask serve` with two principals.
#
#   scripts/ui.sh
#
# Installs what it needs and fails when it cannot (it never skips):
#   - Debian's `chromium` (apt-get), used as /usr/bin/chromium;
#   - `playwright-core`, pinned in tests/ui/package.json (+ package-lock.json),
#     into $CACHE/node with the machine's npm (a stamp of the pin files decides
#     whether to reinstall); tests/ui/node_modules is made a symlink to it so
#     the ESM test resolves its import.
# Then builds target/debug/subtask, starts `subtask serve --memory --tokens`
# on a free loopback port with tokens for `alice` and `bob`, and runs
# tests/ui/ui.mjs, which prints `ok <check>` / `FAIL <check>: <reason>` lines
# and saves screenshots to $SHOTS (default target/ui-screenshots): look at them.
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
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

TOKEN_A="ui-alice-$RANDOM$RANDOM"
TOKEN_B="ui-bob-$RANDOM$RANDOM"
printf '%s alice\n%s bob\n' "$TOKEN_A" "$TOKEN_B" >"$WORK/tokens"
"$SERVER_BIN" serve --memory --listen 127.0.0.1:0 --tokens "$WORK/tokens" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
ADDR=""
for _ in $(seq 1 300); do
  ADDR="$(grep -o 'listening on http://[0-9.:]*' "$WORK/server.log" | head -1 | sed 's|listening on http://||' || true)"
  [[ -n "$ADDR" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; fail "the server exited at start"; }
  sleep 0.1
done
[[ -n "$ADDR" ]] || { cat "$WORK/server.log" >&2; fail "the server did not start listening"; }

# ---------------------------------------------------------------- test
mkdir -p "$SHOTS"
rm -f "$SHOTS"/*.png
echo "== tests/ui/ui.mjs against http://$ADDR (screenshots in $SHOTS)" >&2
set +e
SUBTASK_BASE="http://$ADDR" TOKEN_A="$TOKEN_A" TOKEN_B="$TOKEN_B" SHOTS="$SHOTS" CHROMIUM="$CHROMIUM" \
  timeout "$TIMEOUT_S" node "$DIR/ui.mjs"
status=$?
set -e
if [[ $status -ne 0 ]]; then
  echo "---- server log (last 40 lines)" >&2
  tail -40 "$WORK/server.log" >&2
  [[ $status -eq 124 ]] && fail "the browser test timed out after ${TIMEOUT_S}s"
  fail "the browser test failed"
fi
echo "ui.sh: the browser test passed; screenshots in $SHOTS" >&2
