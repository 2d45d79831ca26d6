#!/usr/bin/env bash
# End-to-end test of the memwatch dashboard in a real browser (Debian's chromium, headless).
#
# Installs chromium when missing (idempotent), records synthetic runs into a fresh SQLite
# database through the daemon's own ingest code (daemon/examples/dash_fixture.rs), starts
# `memwatch serve` on loopback, loads every page headless, checks the rendered DOM for
# content, checks that the browser logged no JavaScript errors, and saves screenshots to
# target/dashboard-screenshots/. Exit 0: all pages passed; 1: a check failed.
#
#   bash tests/e2e/dashboard.sh [EVENTS]        # EVENTS: size of the big run (default 300000)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
EVENTS=${1:-300000}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
SHOTS=$ROOT/target/dashboard-screenshots
mkdir -p "$SHOTS"

if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "e2e: installing chromium"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi

cargo build -q -p memwatch --bin memwatch
cargo build -q -p memwatch-daemon --example dash_fixture
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

DB=$WORK/e2e.db
"$TARGET/debug/examples/dash_fixture" "$DB" "$EVENTS"
# A run with PJRT records (executables, executions, jax.Array buffers) from a real H200
# capture (JAX 0.11.2, see testdata/h200-captures/README.md), through `memwatch import`.
PJRT_RUN=$("$TARGET/debug/memwatch" import testdata/h200-captures/jax0.11.2-platform-allocator.mwcap \
  --db "$DB" --run h200-jax --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
# A second, empty database for the empty-state page.
EMPTY=$WORK/empty.db

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
start_server() {
  local db=$1 p=$2
  "$TARGET/debug/memwatch" serve --db "$db" --listen "127.0.0.1:$p" --ingest "127.0.0.1:$(port)" 2>"$WORK/serve.log" &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$p/api/runs')" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "e2e: memwatch serve did not start:"; cat "$WORK/serve.log"; return 1
}
stop_server() { kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; }

CHROME=(chromium --headless --no-sandbox --disable-gpu --disable-background-networking
  --disable-component-update --disable-sync --no-first-run --hide-scrollbars
  --enable-logging=stderr --v=0 --virtual-time-budget=5000)

FAILED=0
# check NAME URL NEEDLE... : dump the DOM (after scripts ran), look for each needle and for
# console errors, then take a screenshot.
check() {
  local name=$1 url=$2; shift 2
  local dom=$WORK/$name.html log=$WORK/$name.log
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --dump-dom "$url" >"$dom" 2>"$log" || true
  local ok=1
  for needle in "$@"; do
    if ! grep -qF -- "$needle" "$dom"; then echo "e2e: FAIL $name: page lacks '$needle'"; ok=0; fi
  done
  if grep -E "Uncaught|SyntaxError|TypeError|ReferenceError|Failed to load resource" "$log" | grep -v "favicon" >"$WORK/$name.err"; then
    if [ -s "$WORK/$name.err" ]; then echo "e2e: FAIL $name: console errors:"; cat "$WORK/$name.err"; ok=0; fi
  fi
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,900 \
    --screenshot="$SHOTS/$name.png" "$url" >/dev/null 2>"$log.shot" || true
  [ -s "$SHOTS/$name.png" ] || { echo "e2e: FAIL $name: no screenshot"; ok=0; }
  if [ $ok = 1 ]; then echo "e2e: ok   $name  ($url)"; else FAILED=1; fi
}

P=$(port)
start_server "$EMPTY" "$P"
check 00-empty "http://127.0.0.1:$P/" "No data yet" "memwatch run --db" "memwatch import"
stop_server

P=$(port)
start_server "$DB" "$P"
B="http://127.0.0.1:$P"
check 01-overview "$B/" "gpu-node-1" "NVIDIA H200" "VRAM" "GTT" "train-oom" "baseline" ">OOM<"
check 02-run "$B/runs/2" "Live bytes over time" "peak " "failed allocation (1 here, 1 in run)" "API calls" "Perfetto trace"
check 03-run-zoomed "$B/runs/2?from=1000000&to=40000000" "showing 1.00 ms" "API calls on"
"${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,2000 \
  --screenshot="$SHOTS/03b-run-zoomed-full.png" "$B/runs/2?from=1000000&to=40000000" >/dev/null 2>&1 || true
check 04-peak "$B/runs/2/peak?device=0" "What was live at the peak" "By size class" "By memory kind" "By thread" "By annotation" "<details>"
check 05-compare "$B/compare?a=1&b=2" "Peak composition" "A: #1 baseline" "B: #2 train-oom"
check 06-incidents "$B/incidents" "150 GiB" "cudaMalloc" "#2"
check 07-xla "$B/xla" "No XLA modules are stored"
check 08-gates "$B/gates" "No gate results are stored"
check 09-notfound "$B/runs/99" "There is no run #99"
check 10-peak-runtime "$B/runs/$PJRT_RUN/peak?device=0" "Runtime attribution (PJRT)" "jit_broadcast_in_dim" \
  "Compiled memory statistics of jit_broadcast_in_dim" "By XLA module"

# Exports download and parse.
curl -fsS "$B/runs/2/export/perfetto.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); e=d["traceEvents"]; assert any(x["ph"]=="C" for x in e) and any(x["ph"]=="X" for x in e); print("e2e: ok   perfetto export:", len(e), "trace events")' || FAILED=1
curl -fsS "$B/runs/2/export/trace.jsonl?device=0" | python3 -c 'import json,sys; n=0
for l in sys.stdin: json.loads(l); n+=1
assert n>0; print("e2e: ok   jsonl export:", n, "lines")' || FAILED=1

# Server time per page, as seen by curl on loopback (the big run has ~'"$EVENTS"' events).
for u in / /runs/2 "/runs/2/chart.svg?device=0&from=1000000&to=2000000" /runs/2/peak?device=0 "/compare?a=1&b=2"; do
  curl -s -o /dev/null -w "e2e: time %{time_total}s  $u\n" "$B$u"
done
echo "e2e: screenshots in $SHOTS"
exit $FAILED
