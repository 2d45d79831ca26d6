#!/usr/bin/env bash
# Receiver throughput: events/s written to the capture file with 1, 4 and 8 concurrent
# synthetic shim connections (criterion-free bench target; first argument = events per
# client, default 2,000,000).
set -euo pipefail
cd "$(dirname "$0")/.."
MEMWATCH_BENCH_EVENTS="${1:-2000000}" cargo bench -q -p memwatch-agent --bench receiver_throughput
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
