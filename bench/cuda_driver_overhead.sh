#!/usr/bin/env bash
# What the shim adds to real CUDA driver allocation calls (NVIDIA GPU needed): the figure
# a user pays, next to bench/shim_overhead.sh's simulated runtime, whose calls take tens
# of nanoseconds where the driver's take microseconds.
#
# bench/cuda_driver_pairs.c reaches libcuda.so.1 as XLA does (dlopen + dlsym, so the
# shim's dlsym path) and times pairs of
#   sync:  cuMemAlloc_v2 + cuMemFree_v2 (2 MiB; XLA_PYTHON_CLIENT_ALLOCATOR=platform-like
#          one-driver-call-per-buffer traffic),
#   async: cuMemAllocAsync + cuMemFreeAsync on a stream from the default memory pool
#          (=cuda_async; served from the pool, the fastest real allocation path),
# with 1 and 8 threads on device 0, two ways:
#  - separate processes: 7 rounds alternate a process without the shim and one with it
#    (MEMWATCH_SINK=file:...); each prints the median over its batches; the figure is the
#    median of the 7 rounds;
#  - side by side in one process under the shim (ab-sync / ab-async): ABBA batches through
#    the shim's wrappers (dlsym) and through the driver functions' own addresses (from
#    libcuda's ELF symbol table), so a slow spell of the host or the GPU lands on both;
#    the figure is the median over 3 runs of each run's median per-round difference.
# The last shim run's capture is checked: one event per hooked call, the drop count.
# A last part runs without the shim: the side-by-side async pairs with CUDA_PAIRS_PAD_NS
# (100 and 200 ns of the caller's own busy work after each call, touching no memory). Its
# figure is what the driver makes of any work between its calls, so the shim's added cost
# can be read against it (with 8 threads the driver multiplies such work many times).
#
#   bench/cuda_driver_overhead.sh [SHIM.so]    (needs cc, python3, an NVIDIA driver)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=bench/shim_lib.sh
. "$root/bench/shim_lib.sh"
shim="$(release_shim "${1:-}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cc -O2 -pthread -o "$work/pairs" "$root/bench/cuda_driver_pairs.c" -ldl
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
echo "shim: $shim"
field() { sed -n "s/.* $1=\([-0-9.]*\).*/\1/p"; }
count() { python3 - "$root/tests/gpu" "$1" "$2" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from capture_frameworks import read_capture, api_name
ev, _, other = read_capture(sys.argv[2])
names = sys.argv[3].split(",")
n = sum(1 for e in ev if api_name(e["api"]) in names)
print(n, other.get("dropped_total", 0))
PY
}
for mode in sync async; do
  if [ "$mode" = sync ]; then apis=cuMemAlloc_v2,cuMemFree_v2; pairs=200; else apis=cuMemAllocAsync,cuMemFreeAsync; pairs=1000; fi
  for threads in 1 8; do
    plain=(); shimmed=()
    for round in 1 2 3 4 5 6 7; do
      plain+=("$("$work/pairs" "$mode" "$threads" 50 "$pairs" 2097152 | field median_ns_per_call)")
      rm -f "$work/c.mwcap"
      shimmed+=("$(LD_PRELOAD="$shim" MEMWATCH_SINK="file:$work/c.mwcap" "$work/pairs" "$mode" "$threads" 50 "$pairs" 2097152 | field median_ns_per_call)")
    done
    calls=$((2 * threads * 51 * pairs))
    read -r seen dropped < <(count "$work/c.mwcap" "$apis")
    p=$(printf '%s\n' "${plain[@]}" | median); s=$(printf '%s\n' "${shimmed[@]}" | median)
    echo "$mode ($apis, 2 MiB), $threads thread(s): without shim $p ns per call, with shim $s ns, added $(awk "BEGIN{printf \"%.1f\", $s-$p}") ns = $(awk "BEGIN{printf \"%.2f\", 100*($s-$p)/$p}") % (median of 7 alternating rounds x 50 batches x $pairs pairs per thread; rounds: plain ${plain[*]} / shim ${shimmed[*]}); last shim round: $seen of $calls calls captured, $dropped dropped"
  done
done
for mode in sync async; do
  if [ "$mode" = sync ]; then apis=cuMemAlloc_v2,cuMemFree_v2; pairs=200; else apis=cuMemAllocAsync,cuMemFreeAsync; pairs=1000; fi
  for threads in 1 8; do
    added=(); runs=()
    for run in 1 2 3; do
      rm -f "$work/ab.mwcap"
      line=$(LD_PRELOAD="$shim" MEMWATCH_SINK="file:$work/ab.mwcap" "$work/pairs" "ab-$mode" "$threads" 30 "$pairs" 2097152)
      added+=("$(field added_median_ns_per_call <<<"$line")")
      runs+=("$(field direct_median_ns_per_call <<<"$line")/$(field dlsym_median_ns_per_call <<<"$line")/$(field added_median_ns_per_call <<<"$line") (p10 $(field added_p10 <<<"$line"), p90 $(field added_p90 <<<"$line"))")
      hooked=$(field hooked_calls <<<"$line")
    done
    read -r seen dropped < <(count "$work/ab.mwcap" "$apis")
    a=$(printf '%s\n' "${added[@]}" | median)
    echo "$mode side by side in one process (ABBA), $threads thread(s): added $a ns per call (median of 3 runs x 30 rounds x 4 batches x $pairs pairs per thread; runs direct/shim/added ns: ${runs[*]}); last run: $seen of $hooked hooked calls captured, $dropped dropped"
  done
done
for threads in 1 8; do
  for pad in 100 200; do
    added=()
    for run in 1 2 3; do
      added+=("$(CUDA_PAIRS_PAD_NS=$pad "$work/pairs" ab-async "$threads" 30 1000 2097152 | field added_median_ns_per_call)")
    done
    echo "async without the shim, $threads thread(s), $pad ns of the caller's own work after each call (no memory touched): added $(printf '%s\n' "${added[@]}" | median) ns per call (median of 3 side-by-side runs: ${added[*]})"
  done
done
