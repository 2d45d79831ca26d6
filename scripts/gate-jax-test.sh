#!/usr/bin/env bash
# The gate's end-to-end JAX test (needs Python 3 and network for the first venv set-up).
#
#   scripts/gate-jax-test.sh               generate fresh dumps + memory_analysis() with
#                                          jax[cpu]==0.10.2, check they match the checked-in
#                                          testdata/gate-jax0.10.2/, then run the gate scenario
#   scripts/gate-jax-test.sh --regenerate  same, but (re)write testdata/gate-jax0.10.2/
#
# Scenario (on the fresh data): record a baseline from the `checkpoint` model; the
# `no-checkpoint` model (jax.checkpoint removed) must FAIL the gate (exit 1) naming
# jit_train_step, metric temp and the exact Δ; the `small` model must PASS and report the
# improvement. The Rust test cli/tests/gate_jax.rs runs the same scenario on the
# checked-in copy without Python.
set -euo pipefail
cd "$(dirname "$0")/.."
REGEN=0
[ "${1:-}" = "--regenerate" ] && REGEN=1
PY="$(bash scripts/jax-venv.sh | tail -n 1)"
"$PY" python/memwatch-jax/tests/test_memwatch_jax.py
FIX=testdata/gate-jax0.10.2
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

for v in checkpoint no-checkpoint small; do
  "$PY" scripts/gate_jax_fixtures.py "$v" "$WORK/$v"
  # Keep the text dumps memwatch reads; drop LLVM IR, object files, unoptimised HLO.
  find "$WORK/$v/dump" -mindepth 1 \( -type d -o ! -name '*.txt' -o -name '*before_optimizations*' \) -prune -exec rm -rf {} +
done

if [ "$REGEN" = 1 ]; then
  rm -rf "$FIX"; mkdir -p "$FIX"
  for v in checkpoint no-checkpoint small; do cp -r "$WORK/$v" "$FIX/$v"; done
  echo "gate-jax-test: wrote $FIX"
else
  # The compiler's figures are deterministic: fresh ones must equal the checked-in ones.
  "$PY" - "$WORK" "$FIX" <<'PYEOF'
import json, sys
work, fix = sys.argv[1], sys.argv[2]
for v in ("checkpoint", "no-checkpoint", "small"):
    new = {e["name"]: e["memory_analysis"] for e in json.load(open(f"{work}/{v}/memory.json"))["entries"]}
    old = {e["name"]: e["memory_analysis"] for e in json.load(open(f"{fix}/{v}/memory.json"))["entries"]}
    if new != old:
        sys.exit(f"gate-jax-test: {v}: fresh memory_analysis() differs from {fix}/{v}/memory.json:\n{new}\n{old}")
print("gate-jax-test: fresh memory_analysis() figures equal the checked-in fixtures")
PYEOF
fi

cargo build -q -p memwatch
MW="${CARGO_TARGET_DIR:-target}/debug/memwatch"
BASE="$WORK/baseline.toml"
W="$WORK"

"$MW" gate --baseline "$BASE" --memory-analysis "$W/checkpoint/memory.json" --update >/dev/null
echo "gate-jax-test: baseline recorded from the jax.checkpoint model"

set +e
"$MW" gate --baseline "$BASE" --memory-analysis "$W/no-checkpoint/memory.json" \
  --max-increase 2% --max-increase-bytes 512KiB --json >"$W/regressed.json"
rc=$?
"$MW" gate --baseline "$BASE" --memory-analysis "$W/no-checkpoint/memory.json" \
  --max-increase 2% --max-increase-bytes 512KiB >"$W/regressed.txt"
set -e
[ "$rc" = 1 ] || { echo "gate-jax-test: FAIL: expected exit 1 without jax.checkpoint, got $rc"; exit 1; }
cat "$W/regressed.txt"

"$MW" gate --baseline "$BASE" --memory-analysis "$W/small/memory.json" \
  --max-increase 2% --max-increase-bytes 512KiB --json >"$W/improved.json" \
  || { echo "gate-jax-test: FAIL: the smaller model must pass"; exit 1; }

# The same scenario on the fresh XLA dumps (figures from the dump parser, not from JAX).
"$MW" gate --baseline "$W/dump-baseline.toml" --xla-dump "$W/checkpoint/dump" --update 2>/dev/null >/dev/null
set +e
"$MW" gate --baseline "$W/dump-baseline.toml" --xla-dump "$W/no-checkpoint/dump" \
  --max-increase 2% --max-increase-bytes 512KiB --json >"$W/dump-regressed.json"
rc=$?
set -e
[ "$rc" = 1 ] || { echo "gate-jax-test: FAIL: XLA dumps: expected exit 1 without jax.checkpoint, got $rc"; exit 1; }
"$MW" gate --baseline "$W/dump-baseline.toml" --xla-dump "$W/small/dump" \
  --max-increase 2% --max-increase-bytes 512KiB >/dev/null \
  || { echo "gate-jax-test: FAIL: XLA dumps: the smaller model must pass"; exit 1; }

"$PY" - "$W" <<'PYEOF'
import json, sys
w = sys.argv[1]
def ma(v):
    return {e["name"]: e["memory_analysis"] for e in json.load(open(f"{w}/{v}/memory.json"))["entries"]}
base, grown, small = ma("checkpoint"), ma("no-checkpoint"), ma("small")
reg = json.load(open(f"{w}/regressed.json"))
assert not reg["passed"], reg["summary"]
by = {e["key"]: e for e in reg["entries"]}
step = by["jit_train_step"]
assert step["status"] == "regressed", step["status"]
temp = next(m for m in step["metrics"] if m["metric"] == "temp")
want = grown["jit_train_step"]["temp_size_in_bytes"] - base["jit_train_step"]["temp_size_in_bytes"]
assert want > 0, "removing jax.checkpoint must grow temp"
assert temp["regressed"] and temp["delta_bytes"] == want, (temp, want)
assert by["jit_predict"]["status"] != "regressed", by["jit_predict"]
text = open(f"{w}/regressed.txt").read()
assert "jit_train_step" in text and "REGRESSED" in text and "Temp +" in text, text
imp = json.load(open(f"{w}/improved.json"))
assert imp["passed"]
step = {e["key"]: e for e in imp["entries"]}["jit_train_step"]
assert step["status"] == "improved", step["status"]
temp = next(m for m in step["metrics"] if m["metric"] == "temp")
assert temp["delta_bytes"] == small["jit_train_step"]["temp_size_in_bytes"] - base["jit_train_step"]["temp_size_in_bytes"] < 0, temp
dump = {e["key"]: e for e in json.load(open(f"{w}/dump-regressed.json"))["entries"]}["jit_train_step"]
dtemp = next(m for m in dump["metrics"] if m["metric"] == "temp")
assert dump["status"] == "regressed" and dtemp["regressed"] and dtemp["delta_bytes"] == want, (dump["status"], dtemp, want)
assert dump["op_growth"], "XLA dumps must name the grown ops"
print(f"gate-jax-test: OK (XLA dumps): temp +{dtemp['delta_bytes']} bytes, top grown op {dump['op_growth'][0]['name']}")
print(f"gate-jax-test: OK: without jax.checkpoint jit_train_step temp regressed by {want} bytes "
      f"({temp['delta_bytes']} bytes after shrinking the model: improvement reported)")
PYEOF
