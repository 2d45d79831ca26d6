#!/usr/bin/env bash
# Ingest throughput of two daemon builds side by side, SQLite and PostgreSQL, in one run:
# `bench ingest DB N` (agent forwarder and spool -> TCP -> daemon -> committed) of build A
# and build B alternating, a fresh database each time, so both see the same machine load.
#
#   bash bench/ingest-ab.sh OLD_BENCH NEW_BENCH [EVENTS] [ROUNDS] [PG_URL] > result.txt
#
# OLD_BENCH / NEW_BENCH: release `bench` examples (cargo build --release -p
# memwatch-daemon --example bench) of the two builds. PG_URL: a PostgreSQL server where
# the role may create databases (bash scripts/start-test-postgres.sh prints one); empty:
# SQLite only. Prints every run, then the median per build and backend and B/A.
set -euo pipefail
OLD=${1:?the old build\'s bench binary}
NEW=${2:?the new build\'s bench binary}
EVENTS=${3:-2000000}
ROUNDS=${4:-3}
PG=${5:-}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "# ingest A/B: A=$OLD B=$NEW events=$EVENTS rounds=$ROUNDS"
echo "# host: $(nproc) cores, $(uname -m), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
backends=(sqlite)
[[ -n $PG ]] && backends+=(postgres)
for r in $(seq 1 "$ROUNDS"); do
  for be in "${backends[@]}"; do
    for side in A B; do
      bin=$OLD; [[ $side == B ]] && bin=$NEW
      if [[ $be == sqlite ]]; then
        rm -f "$WORK/ingest.db"*
        db=$WORK/ingest.db
      else
        name=mwbench_$$_${r}_${side,,}
        psql "$PG" -qtAc "CREATE DATABASE $name" >/dev/null
        db=${PG%/*}/$name
      fi
      line=$("$bin" ingest "$db" "$EVENTS" 2>&1 | grep 'events/s' | tail -1)
      [[ $be == postgres ]] && psql "$PG" -qtAc "DROP DATABASE $name" >/dev/null
      echo "$be $side round $r: $line"
      echo "$line" >>"$WORK/$be-$side.txt"
    done
  done
done
python3 - "$WORK" "${backends[@]}" <<'PY'
import re, statistics, sys
work, backends = sys.argv[1], sys.argv[2:]
print("\n# median events/s")
for be in backends:
    med = {}
    for side in "AB":
        rates = [float(m) for m in re.findall(r"= (\d+) events/s", open(f"{work}/{be}-{side}.txt").read())]
        med[side] = statistics.median(rates)
    print(f"{be}: A {med['A']:.0f}  B {med['B']:.0f}  B/A {med['B'] / med['A']:.3f}")
PY
