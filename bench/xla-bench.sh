#!/usr/bin/env bash
# Issue 3 benchmarks: parse throughput on a generated >=100 MB deep-model XLA dump (one
# core; wall and CPU time; peak RSS vs input) and `memwatch xla report` on 500 modules.
# The generated dumps go to a temp dir and are deleted afterwards (never checked in).
#   bench/xla-bench.sh [MB]   (default 110)
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-110}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p memwatch -p memwatch-analysis --example xla_bench
BIN=$CARGO_TARGET_DIR/release/memwatch
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
echo "== generator + in-process figures (cargo example xla_bench)"
"$CARGO_TARGET_DIR/release/examples/xla_bench" "$DIR" "$MB"
SIZE=$(du -sb "$DIR/big" | cut -f1)
echo "== memwatch xla report on the ${SIZE}-byte dump (one process, one thread)"
TIMEFORMAT='   wall %R s, user %U s, sys %S s'
time taskset -c 0 "$BIN" xla report "$DIR/big" --json >/dev/null
if [ -x /usr/bin/time ]; then
    RSS=$(/usr/bin/time -f %M "$BIN" xla report "$DIR/big" --json 2>&1 >/dev/null | tail -1)
    echo "   peak RSS ${RSS} KiB for $((SIZE / 1024)) KiB of input"
fi
echo "== memwatch xla report on 500 modules (table output)"
time "$BIN" xla report "$DIR/many" >/dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
