#!/usr/bin/env bash
# Screenshots of the dashboard pages of imported PyTorch snapshots, in headless Chromium:
# the real H100 snapshots of testdata/torch-snapshots (leak, training loop, side-stream
# frees, expandable segments) and a large one made from the leak's recorded trace by
# `torch_snapshot_bench gen` (SIZE bytes, default 200 MB), each imported with
# `memwatch import --db` into a fresh database and served by `memwatch serve`.
#   bash bench/snapshot_screens.sh OUT_DIR [SIZE]
# Writes OUT_DIR/NN-*.png (1400 px wide) and prints each page's URL and time to answer.
set -euo pipefail
OUT=${1:?usage: snapshot_screens.sh OUT_DIR [SIZE]}
SIZE=${2:-200000000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build -q -p memwatch --bin memwatch
cargo build -q -p memwatch-analysis --example torch_snapshot_bench
# shellcheck source=tests/e2e/serve_lib.sh
. tests/e2e/serve_lib.sh
mkdir -p "$OUT"
MW=$TARGET/debug/memwatch
DB=$WORK/snap.db
import() { "$MW" import "$1" --db "$DB" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["run_id"])'; }
LEAK=$(import testdata/torch-snapshots/leak.pickle)
TRAIN=$(import testdata/torch-snapshots/train_snapshot.pickle)
STREAMS=$(import testdata/torch-snapshots/paths/streams.pickle)
EXP=$(import testdata/torch-snapshots/paths/expandable.pickle)
"$TARGET/debug/examples/torch_snapshot_bench" gen testdata/torch-snapshots/leak.pickle "$WORK/large.pickle" "$SIZE" >&2
ls -l "$WORK/large.pickle" >&2
LARGE=$(import "$WORK/large.pickle")
P=$(port)
start_server "$DB" "$P"
B="http://127.0.0.1:$P"
CHROME=(chromium --headless --no-sandbox --disable-gpu --disable-background-networking
  --disable-component-update --disable-sync --no-first-run --hide-scrollbars --virtual-time-budget=5000)
shot() {
  local name=$1 url=$2 h=${3:-1800}
  curl -s -o /dev/null -w "%{time_total}s  $url\n" "$B$url"
  "${CHROME[@]}" --user-data-dir="$(mktemp -d -p "$WORK")" --window-size=1400,"$h" \
    --screenshot="$OUT/$name.png" "$B$url" >/dev/null 2>&1 || true
}
shot 10-overview "/" 700
shot 11-run-leak "/runs/$LEAK" 3000
shot 12-segments-leak "/runs/$LEAK/segments?device=0" 2400
shot 13-segment-leak-one "/runs/$LEAK/segments?device=0&segment=$(curl -s "$B/runs/$LEAK/segments?device=0" | grep -o 'data-address="0x[0-9a-f]*"' | head -1 | cut -d'"' -f2)" 1600
shot 14-segments-streams "/runs/$STREAMS/segments?device=0" 1400
shot 15-segments-expandable "/runs/$EXP/segments?device=0" 1200
shot 16-compare-leak-train "/compare?a=$LEAK&b=$TRAIN" 3000
shot 17-run-large "/runs/$LARGE" 3000
shot 18-segments-large "/runs/$LARGE/segments?device=0" 2400
echo "runs: leak $LEAK, train $TRAIN, streams $STREAMS, expandable $EXP, large $LARGE"
