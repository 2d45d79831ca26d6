#!/usr/bin/env bash
# `memwatch report` on a 10M-event capture (default; first argument = events), as a user
# runs it: release build, synthetic capture from the synth_capture example (4 processes x
# 8 threads/devices, per-thread batches as the shim flushes them), then the human and the
# JSON report. Prints wall, user and sys time (the wall time suffers when other work
# shares the CPUs; user+sys is the work done).
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-10000000}"
cargo build --release -q -p memwatch -p memwatch-analysis --example synth_capture
target="${CARGO_TARGET_DIR:-target}/release"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$target/examples/synth_capture" "$dir/synth.mwcap" "$events"
ls -l "$dir/synth.mwcap" | awk '{printf "capture: %.0f MiB\n", $5/1048576}'
TIMEFORMAT="  %R s wall, %U s user, %S s sys"
echo "memwatch report --json ($events events):"
time "$target/memwatch" report --json "$dir/synth.mwcap" > "$dir/report.json"
echo "memwatch report (tables):"
time "$target/memwatch" report "$dir/synth.mwcap" > /dev/null
echo "memwatch report --trace:"
time "$target/memwatch" report --trace "$dir/synth.mwcap" > /dev/null 2>&1
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
