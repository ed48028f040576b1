#!/usr/bin/env bash
# The soak: the release `subtask serve` on a SQLite file under a mixed load
# for a given time, its memory and file descriptors watched, every answer
# checked. Not part of scripts/test.sh (it takes minutes by design).
#
#   scripts/soak.sh [MINUTES]          default 10
#
# Environment: SOAK_OUT (the output directory; default target/soak/<time>),
# SOAK_CLIENTS (client loops, default 32), SOAK_POLLERS (default 4),
# SOAK_SEED (replays the random choices, not the timing), SOAK_TTL (the
# tasks' TTL in seconds; default MINUTES * 6 within 45..180).
#
# What it does: builds `subtask` and the load driver (examples/soak/) in
# release mode, starts `subtask serve --db <tmp>/soak.db --listen
# 127.0.0.1:0 --task-ttl TTL`, and runs the driver against it: a few dozen
# concurrent clients (the crate's client library) create `fanout` and
# `deep_research` trees, read, steer, pause and resume, cancel, answer
# input requests with tasks/update, and hold subscriptions/listen streams.
# The driver samples /proc/<pid>/status (VmRSS) and /proc/<pid>/fd every
# 5 s into metrics.csv. Then the server is stopped with SIGTERM.
#
# The soak FAILS (exit status 1, with the reason in summary.txt) if:
#  * RSS grows more than 10% after warm-up. Warm-up is the first
#    max(20% of the run, TTL + 60 s deletion grace + 60 s): finished trees
#    are kept until createdAt + TTL + 60 s, so by then the retained set has
#    its steady size. The baseline is the median of the first max(6, 10%)
#    samples after warm-up, compared with the median of the last max(6, 10%)
#    samples of the load. (Not applied when warm-up is more than half the
#    run: such a run is too short to judge growth.)
#  * the open file descriptors grow: the same medians, last <= baseline *
#    1.25 + 16, and at rest after the run (every client gone) at most 8 more
#    than at rest before it;
#  * any answer is wrong: every tree is checked against a model of what it
#    must end as (status, error, result, children and their order) when it
#    ends and again after the load (byte-identical), or found deleted once
#    past its TTL; snapshots never go backwards; subscriptions deliver every
#    task's final state and end;
#  * an error other than the expected ones appears. Expected: tasks/steer
#    or tasks/pause refused with "task is already <status>" (the task ended
#    first; the named status is checked against its final one), tasks/steer
#    refused because the task's handler finished or it is being cancelled
#    (only for a task that ends cancelled or failed), and tasks/get "not
#    found" for a tree past its deletion time. Anything else (other JSON-RPC
#    errors, HTTP errors, timeouts, broken connections) fails the soak;
#  * the server panics, logs an ERROR, dies, or does not stop cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-10}"
if ! [[ "$minutes" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/soak.sh [MINUTES]  (a whole number of minutes, default 10)" >&2
  exit 2
fi
ttl="${SOAK_TTL:-$((minutes * 6))}"
((ttl < 45)) && ttl=45
((ttl > 180)) && ttl=180
out="${SOAK_OUT:-target/soak/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

echo "== building the release binary and the load driver"
cargo build --release --bin subtask
cargo build --release --example soak

tmp="$(mktemp -d /tmp/subtask-soak.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== starting subtask serve (SQLite at $tmp/soak.db, task TTL ${ttl}s)"
NO_COLOR=1 RUST_LOG="${RUST_LOG:-info}" target/release/subtask serve \
  --db "$tmp/soak.db" --listen 127.0.0.1:0 --task-ttl "$ttl" 2>"$out/server.log" &
server_pid=$!
url=""
for _ in $(seq 300); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$out/server.log" | head -1 || true)"
  [[ -n "$url" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "soak: the server exited before listening:" >&2
    cat "$out/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ -z "$url" ]]; then
  echo "soak: the server did not listen within 30 s" >&2
  exit 1
fi
echo "   $url (pid $server_pid); output in $out"

echo "== ${minutes} min of load"
driver_status=0
seed_args=()
[[ -n "${SOAK_SEED:-}" ]] && seed_args=(--seed "$SOAK_SEED")
target/release/examples/soak --url "$url" --pid "$server_pid" --minutes "$minutes" --out "$out" \
  --ttl-secs "$ttl" --clients "${SOAK_CLIENTS:-32}" --pollers "${SOAK_POLLERS:-4}" "${seed_args[@]}" \
  | tee "$out/driver.log" || driver_status=$?

echo "== stopping the server"
failures=()
if ! kill -0 "$server_pid" 2>/dev/null; then
  failures+=("the server died during the soak")
  wait "$server_pid" 2>/dev/null || true
else
  kill -TERM "$server_pid"
  stopped=""
  for _ in $(seq 300); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      stopped=1
      break
    fi
    sleep 0.1
  done
  if [[ -z "$stopped" ]]; then
    failures+=("the server did not stop within 30 s of SIGTERM")
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  server_status=0
  wait "$server_pid" || server_status=$?
  ((server_status == 0)) || failures+=("the server exited with status $server_status")
fi
server_pid=""
panics="$(grep -c 'panicked' "$out/server.log" || true)"
errors="$(grep -c ' ERROR ' "$out/server.log" || true)"
warnings="$(grep -c ' WARN ' "$out/server.log" || true)"
((panics == 0)) || failures+=("the server panicked $panics times (server.log)")
((errors == 0)) || failures+=("the server logged $errors ERROR lines (server.log)")
echo "server log: $panics panics, $errors ERROR lines, $warnings WARN lines ($out/server.log)" \
  | tee -a "$out/summary.txt"
((driver_status == 0)) || failures+=("the driver found problems (summary above)")

if ((${#failures[@]})); then
  printf 'soak FAILED: %s\n' "${failures[@]}" | tee -a "$out/summary.txt" >&2
  exit 1
fi
echo "soak passed: $out/summary.txt" | tee -a "$out/summary.txt"
