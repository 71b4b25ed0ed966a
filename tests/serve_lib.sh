# Sourced by the server tests. start_serving LOG CMD...: runs CMD (a server started with --port 0) in the
# background with its output in LOG, stops it when the script exits, and waits until the model is loaded; sets
# server_pid and server_port, or prints why not and returns 1.
start_serving() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  server_pid=$!
  trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null' EXIT
  server_port=""
  for _ in $(seq 1 600); do
    server_port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    [ -n "$server_port" ] && grep -q "serving" "$log" && return 0
    sleep 0.05
  done
  echo "FAIL: the server did not start: $(cat "$log")"
  return 1
}
