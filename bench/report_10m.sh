#!/usr/bin/env bash
# `memwatch report` on a 10M-event capture (default; first argument = events), as a user
# runs it: release build, synthetic capture from the synth_capture example (4 processes x
# 8 threads/devices, per-thread batches as the shim flushes them), then the human and the
# JSON report. Prints wall, user and sys time (the wall time suffers when other work
# shares the CPUs; user+sys is the work done).
# Usage: bash bench/report_10m.sh [EVENTS [BASELINE]]
# BASELINE: another memwatch binary, run on the same capture right after this tree's
# build, command by command (lines "A" = baseline, "B" = this tree); both reports' JSON
# are compared.
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-10000000}"
baseline="${2:+$(readlink -f "$2")}"
cargo build --release -q -p memwatch -p memwatch-analysis --example synth_capture
target="${CARGO_TARGET_DIR:-target}/release"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
"$target/examples/synth_capture" "$dir/synth.mwcap" "$events"
ls -l "$dir/synth.mwcap" | awk '{printf "capture: %.0f MiB\n", $5/1048576}'
TIMEFORMAT="  %R s wall, %U s user, %S s sys"
builds=("B $target/memwatch")
[ -n "$baseline" ] && builds=("B $target/memwatch" "A $baseline")
for b in "${builds[@]}"; do
  label=${b%% *}; mw=${b#* }
  [ -n "$baseline" ] || label=""
  echo "${label:+$label }memwatch report --json ($events events):"
  time "$mw" report --json "$dir/synth.mwcap" > "$dir/report$label.json"
done
for b in "${builds[@]}"; do
  label=${b%% *}; mw=${b#* }
  [ -n "$baseline" ] || label=""
  echo "${label:+$label }memwatch report (tables):"
  time "$mw" report "$dir/synth.mwcap" > /dev/null
done
for b in "${builds[@]}"; do
  label=${b%% *}; mw=${b#* }
  [ -n "$baseline" ] || label=""
  echo "${label:+$label }memwatch report --trace:"
  time "$mw" report --trace "$dir/synth.mwcap" > /dev/null 2>&1
done
if [ -n "$baseline" ]; then
  if cmp -s "$dir/reportA.json" "$dir/reportB.json"; then
    echo "A and B print the same report JSON"
  else
    echo "A and B print different report JSON"
  fi
fi
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg)"
