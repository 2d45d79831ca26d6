#!/usr/bin/env bash
# Ingest fairness between peers, as times: the second peer's acknowledgement latency (p50,
# p90, max over its 20 batches of 200 events, from 127.0.0.3) while another peer floods
# batches of 50,000 events over 64 connections (from 127.0.0.2), against an in-process
# daemon (daemon/tests/faults_peers.rs; the test itself checks only order: how many of the
# flooder's batches are acknowledged while one of the second peer's waits). Release build.
# Prints the machine and the commit with the figures, e.g. for
# bench/results/MACHINE-DATE-peers-REV.txt.
#   MACHINE="2-core x86-64 VM, no GPU" bash bench/peers.sh [RUNS]     (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-3}"
echo "# bench/peers.sh at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: ${MACHINE:-unnamed}; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
cargo test -q --release -p memwatch-daemon --test faults_peers --no-run 2>/dev/null
for i in $(seq "$RUNS"); do
  cargo test -q --release -p memwatch-daemon --test faults_peers \
    a_peer_s_many_connections_get_one_turn_per_turn_of_another_peer -- --nocapture 2>&1 |
    grep '^faults: peer' | sed "s/^/run $i: /"
done
echo "# after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
