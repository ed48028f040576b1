#!/usr/bin/env bash
# The project's test command: everything a fresh machine needs, in one place
# (a PostgreSQL server included: scripts/pg.sh installs and starts one).
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

echo "== no import cycle between the modules of src/server and src/store (scripts/module-cycles.py)"
python3 scripts/module-cycles.py src/server src/store

echo "== cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings

echo "== cargo doc (no broken links, no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --all-features --no-deps

echo "== PostgreSQL for the tests (scripts/pg.sh: Debian's package, a throwaway server)"
. scripts/pg.sh
trap pg_stop EXIT
pg_start

echo "== cargo test"
cargo test --all-features

echo "== the in-process server and client tests again, on a PostgreSQL store (tests/support/store.rs)"
SUBTASK_TEST_STORE=postgres cargo test --all-features --test server_http --test legacy_tasks --test client

echo "== feature combinations: runtime only, server without sqlite, client only, rmcp adapter"
# A runtime-only user builds none of the server, client, store or CLI stacks.
runtime_deps="$(cargo tree --no-default-features -e normal --prefix none | awk '{print $1}' | sort -u)"
for heavy in axum reqwest rusqlite postgres tokio-postgres clap petgraph terminal_size tracing-subscriber \
  opentelemetry opentelemetry_sdk opentelemetry-otlp tracing-opentelemetry prometheus-client; do
  if grep -qx "$heavy" <<<"$runtime_deps"; then
    echo "the runtime-only build (--no-default-features) depends on $heavy" >&2
    exit 1
  fi
done
cargo clippy --no-default-features --all-targets -- -D warnings
cargo clippy --no-default-features --features server --all-targets -- -D warnings
cargo clippy --no-default-features --features client --all-targets -- -D warnings
# The rmcp adapter on its own (no SQLite, no client): the library builds.
cargo clippy --no-default-features --features rmcp --lib -- -D warnings
# Runtime only: unit, property and runtime tests and the lib.rs quickstart doctest.
cargo test --no-default-features
# The server without SQLite: its unit tests and doctests.
cargo test --no-default-features --features server --lib
cargo test --no-default-features --features server --doc

echo "== official MCP conformance suite (installs Node 22 and the suite into .cache/)"
bash scripts/conformance.sh

echo "== the web view in headless Chromium (installs Debian's chromium and playwright-core into .cache/)"
bash scripts/ui.sh

echo "== interop suite: released MCP clients drive subtask serve (installs pinned clients into .cache/)"
bash scripts/interop.sh

echo "== OAuth: a real authorization server (oidc-provider) and a released client against subtask serve (scripts/oauth.sh)"
bash scripts/oauth.sh

echo "== workers: the Python and TypeScript SDKs' suites, a tree in three languages, a released client (scripts/workers.sh)"
bash scripts/workers.sh

echo "== scripts/test.sh: all steps passed"
