#!/usr/bin/env bash
# The project's test command: everything a fresh machine needs, in one place.
# Later layers (PostgreSQL) add their steps here.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== toolchain"
cargo --version
rustup component list --installed 2>/dev/null | grep -E '^(rustfmt|clippy)' || true
for c in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$c"; then
    rustup component add "$c"
  fi
done

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings

echo "== cargo test"
cargo test --all-features

echo "== official MCP conformance suite (installs Node 22 and the suite into .cache/)"
bash scripts/conformance.sh

echo "== interop suite: released MCP clients drive subtask serve (installs pinned clients into .cache/)"
bash scripts/interop.sh

echo "== scripts/test.sh: all steps passed"
