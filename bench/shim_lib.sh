# Helpers of the shim benchmarks (bench/shim_overhead.sh, bench/cuda_driver_overhead.sh),
# sourced after they set $root (the checkout).

# The shim to measure: the path given, else a release build of this checkout.
release_shim() {
  if [ -n "${1:-}" ]; then
    echo "$1"
    return
  fi
  (cd "$root" && cargo build --release -q -p memwatch-preload)
  echo "${CARGO_TARGET_DIR:-$root/target}/release/libmemwatch_preload.so"
}

# The median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
