#!/usr/bin/env bash
# PyTorch memory snapshot import (issue 23): a snapshot of about SIZE bytes (default
# 2 GiB), made by repeating the recorded train_snapshot trace (testdata/torch-snapshots/;
# every repetition but the last frees what it held, the last is the recording, so the
# dump still matches), read the way `memwatch report` reads it (scan + replay + report)
# and the way `memwatch import` does (scan + replay + capture records, encoded, not
# stored). Prints MB/s of pickle and peak RSS (VmHWM) for each, and wall/user/sys times.
# With a release memwatch ($MEMWATCH or target/release/memwatch) also times
# `memwatch report --json` and `memwatch import --db` into a fresh SQLite file, and prints
# them side by side with Python's `pickle.load` of the same file: wall seconds and peak
# RSS of each (/usr/bin/time -v).
#   bench/torch_snapshot.sh [SIZE_BYTES]
# SOURCE=synth writes the file with torch::synth instead (memo references reaching back
# across the whole file; CONTEXT=alloc|all); SNAPSHOT=PATH benchmarks an existing file.
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
big="$dir/big.pickle"
if [ -n "${SNAPSHOT:-}" ]; then
    big="$SNAPSHOT"
elif [ "${SOURCE:-gen}" = synth ]; then
    "$bench" synth "$big" "$size" "${CONTEXT:-alloc}"
else
    "$bench" gen testdata/torch-snapshots/train_snapshot.pickle "$big" "$size"
fi
TIMEFORMAT="  %R s wall, %U s user, %S s sys"
for mode in report records; do
    time "$bench" "$mode" "$big"
done
mw="${MEMWATCH:-$target/memwatch}"
# side LABEL CMD...: wall seconds, user+sys seconds and peak RSS of CMD.
side() {
    local label=$1; shift
    /usr/bin/time -v "$@" > /dev/null 2> "$dir/time.txt"
    local rc=$?
    awk -F': ' -v label="$label" -v rc="$rc" '
        /Elapsed \(wall clock\)/ { split($2, t, ":"); wall = (length(t) == 3) ? t[1]*3600 + t[2]*60 + t[3] : t[1]*60 + t[2] }
        /User time/ { user = $2 } /System time/ { sys = $2 }
        /Maximum resident set size/ { rss = $2 / 1024 }
        END { printf "%-26s %9.2f %11.2f %10.0f %4d\n", label, wall, user + sys, rss, rc }' "$dir/time.txt"
}
if [ -x "$mw" ] && [ -x /usr/bin/time ]; then
    echo "side by side on $(basename "$big"), $(stat -c %s "$big") bytes:"
    printf '%-26s %9s %11s %10s %4s\n' reader "wall s" "user+sys s" "RSS MiB" rc
    side "memwatch report --json" "$mw" report --json "$big"
    rm -f "$dir/mw.db"
    side "memwatch import --db" "$mw" import --json "$big" --db "$dir/mw.db"
    side "python3 pickle.load" "${PYTHON:-python3}" -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$big"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
