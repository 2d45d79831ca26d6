#!/usr/bin/env bash
# The memory bound of a real `memwatch serve` (release build, the binary users run) under
# the loads of issue 33: 3M never-freed allocations on one connection, 70,000 open runs,
# 8 connections with one 59 MiB batch each (daemon/tests/faults_memory_loads.rs), the
# Perfetto export to 4 readers at once and to 10 slow readers (faults_export_memory.rs),
# and a flood beside a second client (faults_flood.rs). The tests send the loads and read
# the daemon's peak RSS (VmHWM); `MEMWATCH_SERVE_BIN` makes their daemon child this
# binary's `serve` instead of the test binary (daemon/tests/common/child.rs). Each test
# asserts the stated bound (512 MiB, daemon/README.md); this script prints their figures
# with the machine and the commit, e.g. for bench/results/MACHINE-DATE-daemon-memory-serve.txt.
#   MACHINE="2-core x86-64 VM, no GPU" bash bench/daemon-memory.sh [MEMWATCH_BIN]
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-$PWD/target}
BIN=${1:-}
if [ -z "$BIN" ]; then
  cargo build -q --release -p memwatch --bin memwatch
  BIN=$TARGET/release/memwatch
fi
BIN=$(realpath "$BIN")
echo "# bench/daemon-memory.sh at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: ${MACHINE:-unnamed}; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# daemon: $BIN serve ($("$BIN" --version 2>/dev/null || echo 'version unknown'), $(stat -c %s "$BIN") bytes); clients: the test binaries (debug)"
status=0
for t in faults_memory_loads faults_export_memory faults_flood; do
  cargo test -q -p memwatch-daemon --test "$t" --no-run 2>/dev/null
  start=$(date +%s)
  if MEMWATCH_SERVE_BIN=$BIN cargo test -q -p memwatch-daemon --test "$t" -- --nocapture --test-threads=1 \
    >"${TMPDIR:-/tmp}/daemon-memory-$t.log" 2>&1; then verdict=passed; else verdict=FAILED; status=1; fi
  grep -ho 'faults:.*' "${TMPDIR:-/tmp}/daemon-memory-$t.log" || true
  echo "# $t: $verdict in $(($(date +%s) - start)) s (log ${TMPDIR:-/tmp}/daemon-memory-$t.log)"
done
echo "# after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
