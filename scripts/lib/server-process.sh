# Shared by scripts/conformance.sh and scripts/interop.sh (sourced, not run):
# a server started in its own process group, waited for until it listens,
# and stopped (group first, then the process) when the script exits.
#
# The caller sets SERVER_PID to the background job it started with
# `setsid`, then calls `wait_listening PORT NAME SECONDS`.

SERVER_PID=""

stop_server() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    # The server runs in its own process group (setsid): stop the group.
    kill -TERM -- "-$SERVER_PID" 2>/dev/null || kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$SERVER_PID" 2>/dev/null || kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits until 127.0.0.1:PORT accepts connections; returns 1 with the reason
# on stderr if the server exits first or SECONDS pass.
wait_listening() { # port name seconds
  local port="$1" name="$2" deadline=$((SECONDS + $3))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "$name exited before listening on 127.0.0.1:$port" >&2
      return 1
    fi
    if ((SECONDS >= deadline)); then
      echo "$name did not listen on 127.0.0.1:$port within ${3}s" >&2
      return 1
    fi
    sleep 0.1
  done
}
