#!/usr/bin/env bash
# The daemon's benchmarks for two builds side by side in one run, alternating A, B, A, B
# so both see the same machine load: ingest end to end (`bench ingest DB N`: forwarder
# and spool -> TCP -> daemon -> committed, SQLite) and the dashboard's page render times
# (`dash_fixture DB EVENTS --bench`: best of 3 per page after a warm-up).
#
#   bash bench/daemon-ab.sh OLD_DIR NEW_DIR [EVENTS] [ROUNDS] > result.txt
#
# OLD_DIR and NEW_DIR hold the release `bench` and `dash_fixture` examples of each build
# (cargo build --release -p memwatch-daemon --example bench --example dash_fixture).
# EVENTS: events per ingest run and in the dashboard's big run (default 3000000);
# ROUNDS: alternations (default 3). Prints every run, then per build the median ingest
# rate and per page the median of its best-of-3 times.
set -euo pipefail
OLD=${1:?folder of the old build with bench and dash_fixture}
NEW=${2:?folder of the new build with bench and dash_fixture}
EVENTS=${3:-3000000}
ROUNDS=${4:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "# daemon A/B: A=$OLD B=$NEW events=$EVENTS rounds=$ROUNDS"
echo "# host: $(nproc) cores, $(uname -m), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    dir=$OLD; [ "$side" = B ] && dir=$NEW
    rm -f "$WORK/ingest.db"*
    line=$("$dir/bench" ingest "$WORK/ingest.db" "$EVENTS" 2>&1 | grep 'events/s' | tail -1)
    echo "ingest $side round $r: $line"
    echo "$line" >>"$WORK/ingest-$side.txt"
    rm -f "$WORK/dash.db"*
    "$dir/dash_fixture" "$WORK/dash.db" "$EVENTS" --bench >"$WORK/dash-$side-$r.txt" 2>&1
    sed "s/^/dash $side round $r: /" "$WORK/dash-$side-$r.txt"
  done
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
print("\n# summary (median over rounds)")
for side in "AB":
    rates = [float(m) for m in re.findall(r"= (\d+) events/s", open(f"{work}/ingest-{side}.txt").read())]
    print(f"ingest {side}: median {statistics.median(rates):,.0f} events/s (runs: {', '.join(f'{x:,.0f}' for x in rates)})")
pages = {}
for side in "AB":
    for r in range(1, rounds + 1):
        for line in open(f"{work}/dash-{side}-{r}.txt"):
            m = re.match(r"\s+([\d.]+) ms\s+\d+ B\s+(\S+)", line)
            if m:
                key = re.sub(r"/runs/\d+", "/runs/N", re.sub(r"a=\d+&b=\d+", "a=S&b=N", m.group(2)))
                key = re.sub(r"/api/runs/\d+", "/api/runs/N", key)
                pages.setdefault(key, {"A": [], "B": []})[side].append(float(m.group(1)))
print(f"{'page (server time, best of 3)':70} {'A ms':>9} {'B ms':>9}")
for k, v in pages.items():
    a = statistics.median(v["A"]) if v["A"] else float("nan")
    b = statistics.median(v["B"]) if v["B"] else float("nan")
    print(f"{k:70} {a:9.1f} {b:9.1f}")
PY
