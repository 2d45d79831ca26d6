#!/usr/bin/env bash
# End-to-end test of the memwatch dashboard in a real browser (Debian's chromium, headless).
#
# Installs chromium when missing (scripts/install-deps.sh), records synthetic runs into a fresh SQLite
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

command -v chromium >/dev/null 2>&1 || bash scripts/install-deps.sh

cargo build -q -p memwatch --bin memwatch
cargo build -q -p memwatch-daemon --example dash_fixture
# shellcheck source=tests/e2e/serve_lib.sh
. tests/e2e/serve_lib.sh

DB=$WORK/e2e.db
"$TARGET/debug/examples/dash_fixture" "$DB" "$EVENTS"
# A run with PJRT records (executables, executions, jax.Array buffers) from a real H200
# capture (JAX 0.11.2, see testdata/h200-captures/README.md), through `memwatch import`.
PJRT_RUN=$("$TARGET/debug/memwatch" import testdata/h200-captures/jax0.11.2-platform-allocator.mwcap \
  --db "$DB" --run h200-jax --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
# The framework view from real H100 runs of testdata/oom-corpus (JAX 0.11.2, default BFC
# allocator), each with its verdict (`--log` stderr + `--xla-dump`): a leak of 64 MiB per
# step that ends in RESOURCE_EXHAUSTED, a model that fits, a temp buffer too large at
# execute; and a PyTorch 2.11 snapshot of a leak (allocated vs reserved).
corpus_import() {
  local scenario=$1 d=testdata/oom-corpus/$1
  "$TARGET/debug/memwatch" import "$d/capture.mwcap" --log "$d/stderr.log" --xla-dump "$d/dump" \
    --db "$DB" --run "$scenario" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])'
}
LEAK_RUN=$(corpus_import jax_leak_bfc)
FITS_RUN=$(corpus_import jax_mlp_fits)
TEMP_RUN=$(corpus_import jax_exec_temp)
# A scan whose temp buffer (6.04 GiB) does not fit the pool (H100, jit_rollout).
SCAN_RUN=$(corpus_import jax_scan_temp)
# A real `memwatch attach` to a leaking JAX job (H200, testdata/h200-attach): its pool was
# made before the attach (the shim's pre-attach markers); the job caught the OOM, was
# detached and exited 7. Its scenario is the corpus copy of the same recording.
A=testdata/h200-attach/jax_leak
ATTACH_SCENARIO=testdata/oom-corpus/h200_jax_attach_leak/scenario.json
cmp -s "$A/attach.mwcap" testdata/oom-corpus/h200_jax_attach_leak/capture.mwcap \
  && [ "$(cat "$A/exit_code")" = "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["exit_code"])' "$ATTACH_SCENARIO")" ] \
  || { echo "e2e: FAIL $ATTACH_SCENARIO is not the scenario of $A"; exit 1; }
ATTACH_RUN=$("$TARGET/debug/memwatch" import "$A/attach.mwcap" --log "$A/stderr" --db "$DB" --run attach-jax_leak --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
TORCH_RUN=$("$TARGET/debug/memwatch" import testdata/torch-snapshots/leak.pickle --db "$DB" --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
TORCH2_RUN=$("$TARGET/debug/memwatch" import testdata/torch-snapshots/train_snapshot.pickle --db "$DB" --json \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
# Real H200 recordings of each way a run ends (testdata/h200-gen: a leak, a crash that is
# not memory, a recovered run, a launcher with workers, two frameworks in one process…),
# each with its stderr and XLA dump; dash_pages.py checks their pages against how the
# program exited (scenario.json).
REAL_PAGES=()
for d in testdata/h200-gen/*/; do
  args=("$d/capture.mwcap" --log "$d/stderr.log" --db "$DB" --run "gen-$(basename "$d")" --json)
  [ -d "$d/dump" ] && args+=(--xla-dump "$d/dump")
  id=$("$TARGET/debug/memwatch" import "${args[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
  REAL_PAGES+=("$id:${d}scenario.json")
done
# Two workers of one job on two H100s (testdata/multi-gpu), both exit 0.
for s in jax_train torch_ddp; do
  d=testdata/multi-gpu/$s/
  args=("$d/capture.mwcap" --log "$d/stderr.log" --db "$DB" --run "mg-$s" --json)
  [ -d "$d/dump/rank0" ] && args+=(--xla-dump "$d/dump/rank0")
  id=$("$TARGET/debug/memwatch" import "${args[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
  REAL_PAGES+=("$id:${d}scenario.json")
done
C=testdata/oom-corpus
REAL_PAGES+=("$LEAK_RUN:$C/jax_leak_bfc/scenario.json" "$TEMP_RUN:$C/jax_exec_temp/scenario.json"
  "$FITS_RUN:$C/jax_mlp_fits/scenario.json" "$SCAN_RUN:$C/jax_scan_temp/scenario.json"
  "$ATTACH_RUN:$ATTACH_SCENARIO" "$TORCH_RUN::torch-snapshots/leak.pickle" "$TORCH2_RUN::torch-snapshots/train_snapshot.pickle")
# Gate history: a baseline from run 1, a passing check of run 1, a failing one of run 2
# (each stores its verdicts in gate_results, a second apart).
"$TARGET/debug/memwatch" gate --baseline "$WORK/baseline.toml" --run train=1 --db "$DB" --update >/dev/null
sleep 1
"$TARGET/debug/memwatch" gate --baseline "$WORK/baseline.toml" --run train=1 --db "$DB" >/dev/null
sleep 1
"$TARGET/debug/memwatch" gate --baseline "$WORK/baseline.toml" --run train=2 --db "$DB" >/dev/null && { echo "e2e: FAIL gate should fail on run 2"; exit 1; }
# A second, empty database for the empty-state page.
EMPTY=$WORK/empty.db

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
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,"${SHOT_HEIGHT:-900}" \
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
check 01-overview "$B/" "gpu-node-1" "NVIDIA H200" "VRAM" "GTT" "train-oom" "baseline" ">OOM<" "Running processes" "python serve.py" "VRAM last"
check 02-run "$B/runs/2" "Live bytes over time" "peak " "failed allocation (1 here, 1 in run)" "API calls" "Perfetto trace"
check 03-run-zoomed "$B/runs/2?from=1000000&to=40000000" "showing 1.00 ms" "API calls on"
"${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,2000 \
  --screenshot="$SHOTS/03b-run-zoomed-full.png" "$B/runs/2?from=1000000&to=40000000" >/dev/null 2>&1 || true
check 04-peak "$B/runs/2/peak?device=0" "What was live at the peak" "By size class" "By memory kind" "By thread" "By annotation" "<details>"
check 05-compare "$B/compare?a=1&b=2" "Peak composition" "A: #1 baseline" "B: #2 train-oom"
check 06-incidents "$B/incidents" "150.00 GiB" "cudaMalloc" "#2" "Diagnosis #1"
check 07-xla "$B/xla" "jit_mlp" "jit_padf" "jit_model"
check 08-gates "$B/gates" "train/device0" "train/device1" "3 result(s), 1 failed" "limit (baseline + allowance)"
check 10-incident "$B/incidents/logs/1" "GPU_0_bfc could not allocate 3.25 GiB while running jit_model" "preallocated temp buffer" "jit__normal" "Fragmentation picture" "failed request" "Suggested fixes" "bf16[16384,8192]"
check 11-xla-module "$B/xla/modules/3?diff=1" "Buffer composition at peak" "By HLO op category" "jit(model)/jvp()/dot_general" "Base: module #1 jit_mlp" "Temporaries"
check 12-peak-at "$B/runs/2/peak?device=0&at=123456789" "What was live at 123" "By annotation" "Back to the peak"
check 13-compare-marker "$B/compare?a=1&b=2&align=marker:step%2050" "aligned at their first marker" "Peak composition"
check 09-notfound "$B/runs/99" "There is no run #99"
check 17-peak-runtime "$B/runs/$PJRT_RUN/peak?device=0" "Runtime attribution (PJRT)" "jit_broadcast_in_dim" \
  "Compiled memory statistics of jit_broadcast_in_dim" "By XLA module"
check 18-framework-leak "$B/runs/$LEAK_RUN" "Inside the pool: JAX / PJRT on GPU 0" "live arrays + " \
  "allocator in use" "jit_update" "growing" "The driver view" "RESOURCE_EXHAUSTED"
check 19-framework-fits "$B/runs/$FITS_RUN" "Inside the pool: JAX / PJRT on GPU 0" "Live outputs per executable" "jit_multiply"
check 20-framework-exec-oom "$B/runs/$TEMP_RUN" "Inside the pool: JAX / PJRT on GPU 0" "OOM: " "executions"
check 21-framework-torch "$B/runs/$TORCH_RUN" "Inside the pool: PyTorch on GPU 0" "allocated (live blocks)" "cached in the allocator"
check 24-compare-snapshots "$B/compare?a=$TORCH_RUN&b=$TORCH2_RUN" "Inside the pool" "peak allocated" "PyTorch snapshot leak.pickle" \
  "PyTorch snapshots at the dump" "Difference B − A" "reserved (segments)" "<details class=\"stack\">"
SHOT_HEIGHT=1500 check 26-segments-torch "$B/runs/$TORCH_RUN/segments?device=0" "Allocator segments at the dump: GPU 0" \
  "data-reserved=\"4229955584\"" "cached free" "smaller segments" "<details class=\"stack\">"
check 27-snapshot-devices "$B/runs/$TORCH_RUN" "Devices the snapshot names" "not recorded in the snapshot" "<dt>Taken on</dt>"
SHOT_HEIGHT=1500 check 25-peak-at-framework "$B/runs/$LEAK_RUN/peak?device=0&at=5000000000" "framework buffers live then" "jit_update" "jit(update)/mul" "loop_add_multiply_fusion#0 [output 1]"
check 22-overview-growing "$B/" "badge grow" "per execution of jit_update" "kept)"
for r in "$LEAK_RUN" "$TORCH_RUN"; do
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,2600 \
    --screenshot="$SHOTS/23-framework-full-$r.png" "$B/runs/$r" >/dev/null 2>&1 || true
done

# Prints which run is which kind of run (issue 34's ten kinds) and writes that map to
# $SHOTS/kinds.txt beside the screenshots 30-real-run-RUN.png.
python3 tests/e2e/dash_pages.py --kinds "$SHOTS/kinds.txt" "$B" "${REAL_PAGES[@]}" || FAILED=1
for p in "${REAL_PAGES[@]}"; do
  r=${p%%:*}
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,3200 \
    --screenshot="$SHOTS/30-real-run-$r.png" "$B/runs/$r" >/dev/null 2>&1 || true
done
check 32-attach-peak "$B/runs/$ATTACH_RUN/peak?device=0" "Held before attach: " "since the attach" "Runtime attribution (PJRT)" "jit_leak_step" "A leak: jit_leak_step left 256.00 MiB live"
if grep -qF "unexplained" "$WORK/32-attach-peak.html"; then echo "e2e: FAIL the attach's Peak page calls pre-attach memory unexplained"; FAILED=1; fi
check 31-overview-real "$B/" "crashed: exit 1" "recovered"
if grep -qF "(unknown)" "$WORK/31-overview-real.html"; then echo "e2e: FAIL overview lists a device no driver described"; FAILED=1; fi

# Empty states of the new pages (no log, dump or gate result stored).
stop_server
P=$(port)
start_server "$EMPTY" "$P"
check 14-empty-incidents "http://127.0.0.1:$P/incidents" "No log is attached" "memwatch import --db DB --log"
check 15-empty-xla "http://127.0.0.1:$P/xla" "No XLA dump is stored" "--xla-dump"
check 16-empty-gates "http://127.0.0.1:$P/gates" "No gate results are stored" "memwatch gate --run"
stop_server
P=$(port)
start_server "$DB" "$P"
B="http://127.0.0.1:$P"

# Exports download and parse.
curl -fsS "$B/runs/2/export/perfetto.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); e=d["traceEvents"]; assert any(x["ph"]=="C" for x in e) and any(x["ph"]=="X" for x in e); print("e2e: ok   perfetto export:", len(e), "trace events")' || FAILED=1
curl -fsS "$B/runs/2/export/trace.jsonl?device=0" | python3 -c 'import json,sys; n=0
for l in sys.stdin: json.loads(l); n+=1
assert n>0; print("e2e: ok   jsonl export:", n, "lines")' || FAILED=1

for u in "/runs/2/export/chart.png?device=0" "/incidents/logs/1?format=png" "/xla/modules/3?format=png&chart=category" "/gates?format=png"; do
  curl -fsS "$B$u" | python3 -c 'import sys; b=sys.stdin.buffer.read(); assert b[:8]==b"\x89PNG\r\n\x1a\n", "not a PNG"; print("e2e: ok   png export:", len(b), "bytes  '"$u"'")' || FAILED=1
done

# Server time per page, as seen by curl on loopback (the big run has ~'"$EVENTS"' events).
for u in / /runs/2 "/runs/$LEAK_RUN" "/runs/$TORCH_RUN" "/runs/2/chart.svg?device=0&from=1000000&to=2000000" /runs/2/peak?device=0 "/runs/2/peak?device=0&at=123456789" "/compare?a=1&b=2" /incidents/logs/1 "/xla/modules/3?diff=1" /gates; do
  curl -s -o /dev/null -w "e2e: time %{time_total}s  $u\n" "$B$u"
done
echo "e2e: screenshots in $SHOTS"
exit $FAILED
