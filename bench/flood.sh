#!/usr/bin/env bash
# Ingest fairness under a flood, as times: client B's acknowledgement latency (p50, p99,
# max over its 100 batches of 200 events) while client A floods batches of 20,000 events,
# against a daemon child process (daemon/tests/faults_flood.rs; the test itself checks
# only order: how many of the flooder's batches are acknowledged while one of B's waits).
# Release build. Prints the machine and the commit with the figures, e.g. for
# bench/results/MACHINE-DATE-flood-REV.txt.
#   bash bench/flood.sh [RUNS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
echo "# bench/flood.sh at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test -q --release -p memwatch-daemon --test faults_flood --no-run 2>/dev/null
for i in $(seq "$RUNS"); do
  cargo test -q --release -p memwatch-daemon --test faults_flood a_flood_starves_no_one -- --nocapture 2>&1 |
    grep '^faults: flood' | sed "s/^/run $i: /"
done
echo "# after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
