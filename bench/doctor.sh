#!/usr/bin/env bash
# The OOM doctor's figures (issue 22), release build:
#  1. time from the command's exit to the verdict printed by `memwatch run`, on a capture
#     of 10M events: a real `memwatch run` of the shim's test program (10M hooked calls
#     through the preload shim and the receiver, the test runtime of
#     agents/preload/tests/runtime standing in for the GPU driver) that ends with a real
#     PyTorch OOM on its stderr (testdata/oom-corpus/torch_fraction), measured by memwatch
#     itself (MEMWATCH_RUN_TIMING=1: what was left to fold or read, diagnosis, report and
#     printing after exit). Twice: "flat out" (three threads making calls as fast as they
#     can, about 3M calls/s, both cores busy with the program and memwatch: the fold falls
#     behind and catches up after exit) and "paced" (the same 10M calls at 1M calls/s over
#     10 s, still far more than a GPU program makes: what is left after exit is the end of
#     the capture, not a backlog);
#  2. the same work on the largest corpus scenarios (their captures were recorded on an
#     H100, so the run cannot be repeated here): `memwatch report` + `memwatch diagnose`
#     of their capture, stderr, samples and dump, each the best of 5 (an upper bound: two
#     processes read the capture twice where `memwatch run` reads it once);
#  3. `memwatch diagnose` on a 1 GiB stderr log (a training log's lines, the corpus runs'
#     startup lines, and a real OOM report at the end): MB/s, best of 3.
# Usage: bash bench/doctor.sh [EVENTS [BASELINE]]   (default 10000000; needs cc and python3)
# MEMWATCH_BENCH_PREBUILT=DIR uses DIR's release memwatch and shim instead of building them.
# BASELINE: another memwatch binary (e.g. a release build of an earlier commit), measured
# in the same run with the same shim: figure 1 alternates the two builds (A B B A), 2 and 3
# run both, each line saying which build it is.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
events="${1:-10000000}"
baseline="${2:+$(readlink -f "$2")}"
if [ -n "${MEMWATCH_BENCH_PREBUILT:-}" ]; then
  # Release binaries built elsewhere (a machine without cargo): DIR/memwatch and
  # DIR/libmemwatch_preload.so.
  mw="$(readlink -f "$MEMWATCH_BENCH_PREBUILT/memwatch")"
  shim="$(readlink -f "$MEMWATCH_BENCH_PREBUILT/libmemwatch_preload.so")"
else
  cargo build --release -q -p memwatch -p memwatch-preload
  target="${CARGO_TARGET_DIR:-target}/release"
  mw="$root/$target/memwatch"
  shim="$root/$target/libmemwatch_preload.so"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"

best() { # best wall seconds of N runs of a command (stdout discarded)
  local n=$1; shift
  local b=""
  for _ in $(seq "$n"); do
    local t0 t1
    t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N)
    b=$(awk -v a="$t0" -v z="$t1" -v b="$b" 'BEGIN { d = z - a; if (b == "" || d < b) print d; else print b }')
  done
  echo "$b"
}

# 1. 10M events through memwatch run.
t=agents/preload/tests
cc -O2 -shared -fPIC -o "$work/libmemwatch_testrt.so" "$t/runtime/memwatch_testrt.c" \
  -Wl,--version-script="$t/runtime/memwatch_testrt.map" -lpthread
cc -O2 -DDIRECT -o "$work/mwtest" "$t/c/mwtest.c" -L"$work" -lmemwatch_testrt -Wl,-rpath,"$work" -lpthread
# Three threads of alloc/free pairs (one thread's bench tops out near 8M events); the
# count recorded is printed.
batches=$((events / 6000))
oom="$root/testdata/oom-corpus/torch_fraction/stderr.log"
run10m() { # label, memwatch binary, pace (calls/s; 0: flat out)
  local label=$1 bin=$2 pace=${3:-0} calls
  if [ "$pace" = 0 ]; then
    calls="'$work/mwtest' direct bench 3 $batches 1000"
    label="${label}flat out, "
  else
    calls="'$work/mwtest' direct rate 3 $(awk -v e="$events" -v p="$pace" 'BEGIN{print e / p}') $pace"
    label="${label}paced at $pace calls/s, "
  fi
  (cd "$work" && MEMWATCH_PRELOAD="$shim" MEMWATCH_RUN_TIMING=1 MEMWATCH_BUFFER_EVENTS=16777216 \
    "$bin" run --out big.mwcap -- sh -c "$calls > /dev/null; cat '$oom' >&2; exit 1" \
    2> run.err) || true
  local n
  n=$("$mw" report --json "$work/big.mwcap" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(sum(d.get("alloc_count",0)+d.get("free_count",0) for p in r["processes"] for d in p["devices"]))')
  echo "${label}memwatch run, $n allocation/free events ($(du -m "$work/big.mwcap" | cut -f1) MiB capture): $(grep -o 'done [0-9.]* s after the command exited' "$work/run.err") ($(grep -o 'after the command: .*' "$work/run.err" | sed 's/^after the command: //' | paste -sd ';' | sed 's/;/; /g')); verdict: $(grep -o '^\[1\] [a-z_]* — failure' "$work/run.err" || echo none)$(grep -o ', [0-9]* DROPPED events' "$work/run.err" | paste -sd ' ' || true)"
  rm -f "$work/big.mwcap"
}
if [ -n "$baseline" ]; then
  echo "A = baseline $baseline, B = this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', uncommitted changes'))"
  for pace in 0 1000000; do
    run10m "A " "$baseline" $pace; run10m "B " "$mw" $pace; run10m "B " "$mw" $pace; run10m "A " "$baseline" $pace
  done
  builds=("A $baseline" "B $mw")
else
  run10m "" "$mw" 0; run10m "" "$mw" 1000000
  builds=(" $mw")
fi

# 2. The largest corpus scenarios: overall, and the largest that failed.
largest=$(ls -S testdata/oom-corpus/*/capture.mwcap | head -1 | xargs dirname)
failing=$(for c in $(ls -S testdata/oom-corpus/*/capture.mwcap); do d=$(dirname "$c"); grep -q '"failure": true' "$d/scenario.json" && { echo "$d"; break; }; done)
for d in $largest $failing; do
  args=("$d/capture.mwcap" "$d/stderr.log" "$d/nvsmi.csv")
  [ -d "$d/dump" ] && args+=(--xla-dump "$d/dump")
  for b in "${builds[@]}"; do
    label=${b%% *}; bin=${b#* }
    r=$(best 5 "$bin" report "$d/capture.mwcap")
    g=$(best 5 "$bin" diagnose "${args[@]}")
    echo "${label:+$label }corpus $(basename "$d") ($(du -k "$d/capture.mwcap" | cut -f1) KiB capture): report ${r} s + diagnose ${g} s = $(awk -v a="$r" -v b="$g" 'BEGIN{printf "%.3f", a+b}') s (best of 5 each)"
  done
done

# 3. A 1 GiB stderr log.
python3 - "$work/big.log" "$root/testdata/oom-corpus" <<'PY'
import glob, os, sys
out, corpus = sys.argv[1], sys.argv[2]
heads = []
for f in sorted(glob.glob(os.path.join(corpus, "*/stderr.log"))):
    heads += [l for l in open(f) if l.startswith("I1125")][:8]
tail = open(os.path.join(corpus, "jax_fragmentation/stderr.log")).read()
target = 1 << 30
with open(out, "w") as o:
    n, i = 0, 0
    while n < target - len(tail):
        block = []
        for k in range(100):
            block.append(f"step {i}: loss {1.0 / (i + 1):.6f} lr 3.0e-04 grad_norm {0.5 + (i % 7) / 10:.3f} tokens/s {12000 + i % 977} mem {(i % 4096) * 1.5:.1f}MiB\n")
            i += 1
        block.append(heads[i % len(heads)])
        s = "".join(block)
        o.write(s)
        n += len(s)
    o.write(tail)
PY
size=$(stat -c %s "$work/big.log")
for b in "${builds[@]}"; do
  label=${b%% *}; bin=${b#* }
  s=$(best 3 "$bin" diagnose "$work/big.log" --json)
  echo "${label:+$label }memwatch diagnose on a $((size >> 20)) MiB stderr log: ${s} s, $(awk -v b="$size" -v s="$s" 'BEGIN{printf "%.0f", b / 1e6 / s}') MB/s (best of 3; verdict $("$bin" diagnose "$work/big.log" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["verdicts"][0]["kind"])'))"
done
