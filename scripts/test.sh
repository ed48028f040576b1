#!/usr/bin/env bash
# The project's test command: everything a fresh machine needs, in one place
# (a PostgreSQL server included: scripts/pg.sh installs and starts one).
set -euo pipefail
cd "$(dirname "$0")/.."

# One full run builds each target once, so incremental compilation only adds
# its caches: 3.2 GB of target/debug/incremental on a fresh clone, which once
# ran a CI machine out of disk. Set CARGO_INCREMENTAL=1 to keep them.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Free disk and the size of target/, printed at each heavy step, so that a run
# that fails for space says so.
disk() { echo "   disk: $(df -h --output=avail . | tail -1 | tr -d ' ') free, target/ $(du -sh target 2>/dev/null | cut -f1 || echo 0)"; }

# SUBTASK_TEST_PRUNE=1 (.ci/run sets it) deletes build outputs that no later
# step uses once their step is done: the test binaries after the cargo test
# steps, the release build after the conformance suite. Off by default, as a
# developer's next `cargo test` would link them all again.
prune() {
  [[ "${SUBTASK_TEST_PRUNE:-0}" == 1 ]] || return 0
  echo "== SUBTASK_TEST_PRUNE=1: deleting $1"
  shift
  rm -rf "$@"
  disk
}

echo "== toolchain"
cargo --version
disk
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

echo "== feature combinations: runtime only, server without sqlite, client only, rmcp adapter, each store without the server"
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
# A library user's stores without the server: each builds on its own.
cargo clippy --no-default-features --features sqlite --lib -- -D warnings
cargo clippy --no-default-features --features postgres --lib -- -D warnings
# Runtime only: unit, property and runtime tests and the lib.rs quickstart doctest.
cargo test --no-default-features
# The server without SQLite: its unit tests and doctests.
cargo test --no-default-features --features server --lib
cargo test --no-default-features --features server --doc

disk
# Test binaries are the files in target/debug/deps with no extension; the
# libraries, proc macros and build scripts the later builds reuse all have one.
prune "the test binaries (no later step runs them)" \
  $(find target/debug/deps -maxdepth 1 -type f ! -name '*.*' 2>/dev/null)

echo "== official MCP conformance suite (installs Node 22 and the suite into .cache/)"
bash scripts/conformance.sh
disk
prune "the release build (only the conformance suite used it)" target/release

echo "== the web view in headless Chromium (installs Debian's chromium and playwright-core into .cache/)"
bash scripts/ui.sh
disk

echo "== interop suite: released MCP clients drive subtask serve (installs pinned clients into .cache/)"
bash scripts/interop.sh
disk

echo "== OAuth: a real authorization server (oidc-provider) and a released client against subtask serve (scripts/oauth.sh)"
bash scripts/oauth.sh

echo "== workers: the Python and TypeScript SDKs' suites, a tree in three languages, a released client (scripts/workers.sh)"
bash scripts/workers.sh

echo "== scripts/test.sh: all steps passed"
