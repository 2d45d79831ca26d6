#!/usr/bin/env bash
# memwatch attach benchmark: the target's pause during injection and the time from
# starting `memwatch attach` to the first captured event, for the built-in ptrace
# injector and for gdb. Target: a C program allocating through the simulated HIP runtime
# every 2 ms (cli/tests/c/attach_loop.c). Argument: attaches per method (default 10).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-10}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
cargo build -q --release -p memwatch -p memwatch-preload
BIN="$CARGO_TARGET_DIR/release"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"; [ -n "${TPID:-}" ] && kill "$TPID" 2>/dev/null || true' EXIT
RT=agents/preload/tests/runtime
cc -shared -fPIC -O1 -o "$WORK/libmemwatch_testrt.so" "$RT/memwatch_testrt.c" \
   -Wl,--version-script="$RT/memwatch_testrt.map" -lpthread
cc -O1 -o "$WORK/attach_loop" cli/tests/c/attach_loop.c -L"$WORK" -lmemwatch_testrt -Wl,-rpath,"$WORK"

median() { sort -n | awk '{a[NR]=$1} END {if (NR==0) print "n/a"; else print a[int((NR+1)/2)]}'; }
max() { sort -n | tail -1; }

for method in ptrace gdb; do
  runs=$N
  [ "$method" = gdb ] && runs=$(( N < 3 ? N : 3 ))
  "$WORK/attach_loop" 100000 2 >/dev/null &
  TPID=$!
  sleep 0.3
  : >"$WORK/pause" ; : >"$WORK/first" ; : >"$WORK/dpause"
  for i in $(seq "$runs"); do
    out=$("$BIN/memwatch" attach "$TPID" --method "$method" --duration 300ms --json \
          --shim "$BIN/libmemwatch_preload.so" --out "$WORK/c$i.mwcap")
    echo "$out" | grep -o '"pause_ns":[0-9]*' | head -1 | cut -d: -f2 >>"$WORK/pause"
    echo "$out" | grep -o '"detach_pause_ns":[0-9]*' | head -1 | cut -d: -f2 >>"$WORK/dpause"
    echo "$out" | grep -o '"first_event_ns":[0-9]*' | cut -d: -f2 >>"$WORK/first"
  done
  kill "$TPID"; wait "$TPID" 2>/dev/null || true; TPID=
  ms() { awk '{printf "%.1f ms", $1/1e6}'; }
  printf '%-7s %2d attaches: pause at attach median %s (max %s), at detach median %s; attach -> first event median %s (max %s)\n' \
    "$method" "$runs" \
    "$(median <"$WORK/pause" | ms)" "$(max <"$WORK/pause" | ms)" \
    "$(median <"$WORK/dpause" | ms)" \
    "$(median <"$WORK/first" | ms)" "$(max <"$WORK/first" | ms)"
done
echo "target pause: < 200 ms. machine: $(nproc) CPUs, $(uname -m), load average $(cut -d' ' -f1-3 /proc/loadavg)"
