#!/usr/bin/env bash
# Two builds of the LD_PRELOAD shim side by side in one run: the added latency per
# intercepted call (mwtest bench-lat: every hipMalloc and hipFree timed on its own,
# through the hooks and straight into the simulated runtime, alternating pair by pair in
# one process; the median over calls), 1 and 8 threads, the two shims alternating run by
# run (A B B A ...) so a slow spell of the host lands on both.
# Usage: bench/shim_ab.sh A.so B.so [ROUNDS=6] [PAIRS=25000]   (needs cc)
# Prints one line per run and a summary: the median over runs of each build's added ns.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
a="$(readlink -f "${1:?shim A}")"
b="$(readlink -f "${2:?shim B}")"
rounds="${3:-6}"
pairs="${4:-25000}"
# shellcheck source=bench/shim_lib.sh
. "$root/bench/shim_lib.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
t="$root/agents/preload/tests"
cc -O2 -shared -fPIC -o "$work/libmemwatch_testrt.so" "$t/runtime/memwatch_testrt.c" \
  -Wl,--version-script="$t/runtime/memwatch_testrt.map" -lpthread
cc -O2 -DDIRECT -o "$work/mwtest" "$t/c/mwtest.c" -L"$work" -lmemwatch_testrt -Wl,-rpath,"$work" -lpthread
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A: $a"
echo "B: $b"
run() { # shim threads -> added ns per call
  rm -f "$work/l.mwcap"
  LD_PRELOAD="$1" MEMWATCH_SINK="file:$work/l.mwcap" MEMWATCH_BUFFER_EVENTS=65536 \
    "$work/mwtest" direct bench-lat "$2" "$pairs" |
    sed -n 's/.*added_per_call_ns=\([-0-9.]*\).*/\1/p'
}
for threads in 1 8; do
  as=(); bs=()
  for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then
      as+=("$(run "$a" "$threads")"); bs+=("$(run "$b" "$threads")")
    else
      bs+=("$(run "$b" "$threads")"); as+=("$(run "$a" "$threads")")
    fi
    echo "  $threads thread(s), round $round: A ${as[-1]} ns, B ${bs[-1]} ns"
  done
  mean() { awk '{s+=$1} END {printf "%.1f", s/NR}'; }
  echo "added per call, $threads thread(s): A $(printf '%s\n' "${as[@]}" | median) ns, B $(printf '%s\n' "${bs[@]}" | median) ns (median of $rounds runs, each the median over $pairs pairs per thread; means of the runs A $(printf '%s\n' "${as[@]}" | mean), B $(printf '%s\n' "${bs[@]}" | mean) ns; each run's median moves in steps of the timer, ~4.5 ns here)"
done
