#!/usr/bin/env bash
# A capture followed by 2 GB of zeros (issue 25 item 7): how long reading it takes and
# the peak memory, for the salvaging reader alone (agents/wire/examples/damage_scan.rs)
# and for `memwatch report` on it.
# Usage: bench/report_damage.sh [MEMWATCH_BIN] [ZERO_BYTES=2000000000]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mw="${1:-}"
zeros="${2:-2000000000}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cap="$root/testdata/oom-corpus/jax_exec_temp/capture.mwcap"
cp "$cap" "$work/damaged.mwcap"
# Zeros appended as a hole (sparse): reading them costs no disk I/O, only the scan.
truncate -s "+$zeros" "$work/damaged.mwcap"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); capture $(stat -c %s "$cap") bytes + $zeros zero bytes"
(cd "$root" && cargo build --release -q -p memwatch-wire --example damage_scan)
echo "reader: $("${CARGO_TARGET_DIR:-$root/target}/release/examples/damage_scan" "$work/damaged.mwcap")"
if [ -n "$mw" ]; then
  python3 - "$mw" "$work/damaged.mwcap" <<'PY'
import resource, subprocess, sys, time
t0 = time.time()
p = subprocess.run([sys.argv[1], "report", sys.argv[2]], capture_output=True, text=True)
took = time.time() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
damage = [l for l in p.stdout.splitlines() if "damage" in l.lower()][:2]
print(f"memwatch report: exit {p.returncode}, {took:.2f} s, peak RSS {rss:.1f} MiB; {damage}")
PY
fi
