# Helpers of the end-to-end scripts that run `memwatch serve` (tests/e2e/dashboard.sh,
# tests/e2e/api_schema.sh), sourced after they set TARGET (the cargo target directory)
# and built memwatch. Makes WORK, a temporary directory removed at exit, and stops a
# server still running then.

WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# A free TCP port on loopback.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start_server DB PORT [TOKEN]: `memwatch serve` over DB with its API on 127.0.0.1:PORT
# (requiring TOKEN when given); returns once /api/runs answers, or 1 with the server's
# log when it did not start within 10 s. Its output goes to $WORK/serve.log.
start_server() {
  local db=$1 p=$2 token=${3:-}
  local auth=()
  [ -n "$token" ] && auth=(--token "$token")
  "$TARGET/debug/memwatch" serve --db "$db" --listen "127.0.0.1:$p" --ingest "127.0.0.1:$(port)" "${auth[@]}" \
    >"$WORK/serve.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if python3 - "$p" "$token" 2>/dev/null <<'PY'
import sys, urllib.request
headers = {"Authorization": "Bearer " + sys.argv[2]} if sys.argv[2] else {}
urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/api/runs", headers=headers))
PY
    then return 0; fi
    sleep 0.1
  done
  echo "e2e: memwatch serve did not start:"; cat "$WORK/serve.log"; return 1
}

stop_server() { kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; }
