#!/usr/bin/env bash
# PyTorch memory snapshot import (issue 23): a snapshot of about SIZE bytes (default
# 2 GiB), made by repeating the recorded train_snapshot trace (testdata/torch-snapshots/;
# every repetition but the last frees what it held, the last is the recording, so the
# dump still matches), read the way `memwatch report` reads it (scan + replay + report)
# and the way `memwatch import` does (scan + replay + capture records, encoded, not
# stored). Prints MB/s of pickle and peak RSS (VmHWM) for each, and wall/user/sys times.
# With a release memwatch ($MEMWATCH or target/release/memwatch) also times
# `memwatch report --json` and `memwatch import --db` into a fresh SQLite file.
#   bench/torch_snapshot.sh [SIZE_BYTES]
# TORCH_SNAPSHOT_BENCH=PATH runs a prebuilt torch_snapshot_bench instead of building it.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-2147483648}"
target="${CARGO_TARGET_DIR:-target}/release"
if [ -n "${TORCH_SNAPSHOT_BENCH:-}" ]; then
    bench="$TORCH_SNAPSHOT_BENCH"   # a prebuilt example (a machine without cargo)
else
    cargo build --release -q -p memwatch-analysis --example torch_snapshot_bench
    bench="$target/examples/torch_snapshot_bench"
fi
dir="$(mktemp -d "${TMPDIR:-/tmp}/torch-snapshot-bench.XXXXXX")"
trap 'rm -rf "$dir"' EXIT
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
"$bench" gen testdata/torch-snapshots/train_snapshot.pickle "$dir/big.pickle" "$size"
TIMEFORMAT="  %R s wall, %U s user, %S s sys"
for mode in report records; do
    time "$bench" "$mode" "$dir/big.pickle"
done
mw="${MEMWATCH:-$target/memwatch}"
if [ -x "$mw" ]; then
    echo "memwatch report --json:"
    time "$mw" report --json "$dir/big.pickle" > "$dir/report.json"
    echo "memwatch import --db (SQLite):"
    time "$mw" import --json "$dir/big.pickle" --db "$dir/mw.db" > "$dir/import.json"
    grep -E '"(events|batches)"' "$dir/import.json" | tr -d ' \n'; echo
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
