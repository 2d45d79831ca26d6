#!/usr/bin/env bash
# Reading a capture costs time linear in it, whatever its events (issue 38): seconds per
# million events of `memwatch report --json`, `diagnose` (with the run's stderr log),
# `runtime --json` and `import --db`, side by side for two shapes of capture, release
# build:
#  - "10M": the 10M-event capture of bench/doctor.sh (a real `memwatch run` of the
#    shim's test program: three threads of alloc/free pairs through the preload shim and
#    the receiver, ending with a real PyTorch OOM on its stderr), or the file named by
#    MEMWATCH_BENCH_10M (and its stderr log, FILE.stderr.log, when there is one);
#  - "JAX loop": a long JAX loop that keeps every step's output (analysis/examples/
#    synth_jax_loop.rs: STEPS PJRT executions, each leaving a live output buffer, the BFC
#    pool full after ~700 steps and every later execution failing with
#    RESOURCE_EXHAUSTED, XLA's warning for each in the stderr log), killed (no
#    process_end), as `memwatch run` recorded the program of the issue.
# Each figure is the best of 3 (user + sys CPU seconds, the work done: wall time
# suffers when other work shares the CPUs), per million events of its capture, and the
# largest peak RSS of the 3 runs (MB).
#
# Usage: bash bench/long_jax.sh [STEPS [BASELINE]]   (default 1000000 steps: 3M events)
# BASELINE: another memwatch binary (e.g. a release build of an earlier commit), run on
# the same captures, each command stopped after MEMWATCH_BENCH_LIMIT seconds (default
# 600). MEMWATCH_BENCH_PREBUILT=DIR uses DIR's memwatch and libmemwatch_preload.so.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
steps="${1:-1000000}"
baseline="${2:+$(readlink -f "$2")}"
limit="${MEMWATCH_BENCH_LIMIT:-600}"
target="${CARGO_TARGET_DIR:-target}/release"
if [ -n "${MEMWATCH_BENCH_PREBUILT:-}" ]; then
  mw="$(readlink -f "$MEMWATCH_BENCH_PREBUILT/memwatch")"
  shim="$(readlink -f "$MEMWATCH_BENCH_PREBUILT/libmemwatch_preload.so")"
  cargo build --release -q -p memwatch-analysis --example synth_jax_loop
else
  pkgs=(-p memwatch -p memwatch-analysis --example synth_jax_loop)
  [ -n "${MEMWATCH_BENCH_10M:-}" ] || pkgs+=(-p memwatch-preload)
  cargo build --release -q "${pkgs[@]}"
  mw="$root/$target/memwatch"
  shim="$root/$target/libmemwatch_preload.so"
fi
gen="$root/$target/examples/synth_jax_loop"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The 10M-event capture.
if [ -n "${MEMWATCH_BENCH_10M:-}" ]; then
  ln -s "$(readlink -f "$MEMWATCH_BENCH_10M")" "$work/10m.mwcap"
  if [ -f "$MEMWATCH_BENCH_10M.stderr.log" ]; then
    cp "$MEMWATCH_BENCH_10M.stderr.log" "$work/10m.stderr.log"
  else
    cp testdata/oom-corpus/torch_fraction/stderr.log "$work/10m.stderr.log"
  fi
else
  t=agents/preload/tests
  cc -O2 -shared -fPIC -o "$work/libmemwatch_testrt.so" "$t/runtime/memwatch_testrt.c" \
    -Wl,--version-script="$t/runtime/memwatch_testrt.map" -lpthread
  cc -O2 -DDIRECT -o "$work/mwtest" "$t/c/mwtest.c" -L"$work" -lmemwatch_testrt \
    -Wl,-rpath,"$work" -lpthread
  oom="$root/testdata/oom-corpus/torch_fraction/stderr.log"
  (cd "$work" && MEMWATCH_PRELOAD="$shim" MEMWATCH_BUFFER_EVENTS=16777216 \
    "$mw" run --quiet --out 10m.mwcap --stderr-log 10m.stderr.log -- \
    sh -c "'$work/mwtest' direct bench 3 $((10000000 / 6000)) 1000 > /dev/null; cat '$oom' >&2; exit 1" \
    2> /dev/null) || true
fi
# The JAX loop, killed.
"$gen" "$work/jax.mwcap" "$steps" --killed --step-ns 100000 --stderr "$work/jax.stderr.log" > /dev/null

events() { "$mw" report --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])'; }
n10m=$(events "$work/10m.mwcap")
njax=$(events "$work/jax.mwcap")
echo "10M: $n10m events ($(du -m "$work/10m.mwcap" | cut -f1) MiB); JAX loop: $njax events, $steps steps ($(du -m "$work/jax.mwcap" | cut -f1) MiB, no process_end)"

cpu() { # "S RSS": best user+sys seconds of 3 runs of a command (stdout discarded) and
  # the largest peak RSS in MB; "> LIMIT -" if stopped
  local b="" s rc m=0 r
  for _ in 1 2 3; do
    rm -f "$work/import.db" "$work/import.db-wal" "$work/import.db-shm"
    rc=0
    /usr/bin/time -o "$work/time" -f '%U %S %M' timeout -s KILL "$limit" "$@" > /dev/null 2>&1 || rc=$?
    if [ "$rc" = 137 ]; then
      echo "> $limit -"
      return
    fi
    s=$(tail -1 "$work/time" | awk '{print $1 + $2}')
    r=$(tail -1 "$work/time" | awk '{printf "%d", $3 / 1024}')
    [ "$r" -gt "$m" ] && m=$r
    b=$(awk -v s="$s" -v b="$b" 'BEGIN { if (b == "" || s < b) print s; else print b }')
  done
  echo "$b $m"
}
per() { # "S RSS" N -> "s/M (S s, RSS MB)"
  awk -v s="${1% *}" -v m="${1##* }" -v n="$2" 'BEGIN {
    if (s ~ /^>/) print s " s"; else printf "%.3f (%.1f s, %s MB)", s / (n / 1e6), s, m }'
}

builds=("$mw")
[ -n "$baseline" ] && builds+=("$baseline")
printf '%-9s %-9s %-30s %-30s\n' command build "10M: s/M ev (CPU s, peak RSS)" "JAX loop: s/M ev (CPU s, peak RSS)"
for cmd in report diagnose runtime import; do
  for bin in "${builds[@]}"; do
    label=$([ "$bin" = "$mw" ] && echo this || echo baseline)
    row=()
    for c in 10m jax; do
      case $cmd in
        report) s=$(cpu "$bin" report --json "$work/$c.mwcap") ;;
        diagnose) s=$(cpu "$bin" diagnose "$work/$c.mwcap" "$work/$c.stderr.log") ;;
        runtime) s=$(cpu "$bin" runtime --json "$work/$c.mwcap") ;;
        import) s=$(cpu "$bin" import "$work/$c.mwcap" --db "$work/import.db") ;;
      esac
      n=$([ $c = 10m ] && echo "$n10m" || echo "$njax")
      row+=("$(per "$s" "$n")")
    done
    printf '%-9s %-9s %-30s %-30s\n' "$cmd" "$label" "${row[0]}" "${row[1]}"
  done
done
