#!/usr/bin/env bash
# The Python worker SDK's suite (sdk/python/tests) against a real
# `subtask serve`.
#
#   SUBTASK_BIN=target/debug/subtask sdk/python/test.sh [pytest args...]
#
# Creates a venv at $REPO/.cache/workers/venv with the machine's python3
# (reused while its stamp, the python version and the pins, matches),
# installs pytest==8.3.3, hatchling (the build backend) and sdk/python (with
# its one dependency, websockets) into it, and runs `pytest -q sdk/python/tests`. Fails
# (non-zero) when SUBTASK_BIN is unset or not executable, or when anything
# cannot be installed; it never skips.
#
# Environment:
#   SUBTASK_BIN     the `subtask` binary to test against (required)
#   WORKERS_CACHE   where the venv lives (default $REPO/.cache/workers)
#   PYTHON          the interpreter to make the venv with (default python3)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SDK="$REPO/sdk/python"
CACHE="${WORKERS_CACHE:-$REPO/.cache/workers}"
VENV="$CACHE/venv"
PYTHON="${PYTHON:-python3}"
PYTEST_PIN="pytest==8.3.3"
HATCHLING_PIN="hatchling==1.27.0" # the build backend, installed once (no build isolation)

fail() {
  echo "sdk/python/test.sh: $*" >&2
  exit 1
}

[[ -n "${SUBTASK_BIN:-}" ]] || fail "SUBTASK_BIN is not set: point it at a built subtask binary (e.g. target/debug/subtask)"
[[ -x "$SUBTASK_BIN" ]] || fail "SUBTASK_BIN=$SUBTASK_BIN is not an executable file"
SUBTASK_BIN="$(cd "$(dirname "$SUBTASK_BIN")" && pwd)/$(basename "$SUBTASK_BIN")"
export SUBTASK_BIN
command -v "$PYTHON" >/dev/null || fail "$PYTHON is not installed"

stamp="$("$PYTHON" --version 2>&1) $PYTEST_PIN $HATCHLING_PIN $(sha256sum "$SDK/pyproject.toml" | cut -d' ' -f1)"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if [[ ! -x "$VENV/bin/python" || ! -f "$VENV/.stamp" || "$(cat "$VENV/.stamp")" != "$stamp" ]]; then
  echo "== creating $VENV" >&2
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  "$PYTHON" -m venv "$VENV" || fail "$PYTHON -m venv $VENV failed (Debian: apt-get install python3-venv)"
  "${PIP[@]}" "$PYTEST_PIN" "$HATCHLING_PIN" >&2 || fail "pip install $PYTEST_PIN $HATCHLING_PIN failed"
  # The SDK's dependency (websockets), once per stamp.
  "${PIP[@]}" --no-build-isolation "$SDK" >&2 || fail "pip install sdk/python (with its dependencies) failed"
  echo "$stamp" >"$VENV/.stamp"
fi
# The SDK itself, reinstalled every run: its code changes.
"${PIP[@]}" --no-build-isolation --no-deps --force-reinstall "$SDK" >&2 || fail "pip install sdk/python failed"
"$VENV/bin/python" -c "import subtask_worker, websockets, pytest" ||
  fail "the venv lacks subtask_worker, websockets or pytest after installing"

cd "$REPO"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider sdk/python/tests "$@"
