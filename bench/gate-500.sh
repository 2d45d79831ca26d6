#!/usr/bin/env bash
# Benchmark: `memwatch gate` over 500 modules (target < 1 s), release build.
#
#  1. memwatch-jax JSON input: 500 entries (the gate itself: baseline parse, compare,
#     render); baseline recorded with --update, then gated with Markdown + JUnit output.
#  2. XLA dump input: 500 modules made from the checked-in JAX 0.10.2 dumps
#     (testdata/gate-jax0.10.2, jit_train_step and jit_predict alternately, renamed
#     jit_m0..jit_m499), so the time includes parsing ~70 MB of dump text.
# Prints the wall time of each gate run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release -p memwatch
MW="${CARGO_TARGET_DIR:-target}/release/memwatch"
W="$(mktemp -d)"
trap 'rm -rf "$W"' EXIT
N=500

python3 - "$W" "$N" <<'PYEOF'
import json, sys
w, n = sys.argv[1], int(sys.argv[2])
def doc(grow):
    entries = []
    for i in range(n):
        t = 1_000_000 * (i + 1) + (600_000 * (i + 1) if grow and i % 50 == 0 else 0)
        entries.append({"name": f"jit_m{i}", "module": f"jit_m{i}", "memory_analysis": {
            "argument_size_in_bytes": 4_000_000 + i, "output_size_in_bytes": 2_000_000 + i,
            "alias_size_in_bytes": 0, "temp_size_in_bytes": t, "host_temp_size_in_bytes": 0,
            "generated_code_size_in_bytes": 0, "peak_memory_in_bytes": 6_000_000 + t}})
    return {"format": "memwatch-jax", "version": 1, "entries": entries}
json.dump(doc(False), open(f"{w}/base.json", "w"))
json.dump(doc(True), open(f"{w}/new.json", "w"))
PYEOF

# Wall and CPU (user+sys) seconds of one run: the VM is shared, so wall time includes
# waiting for a core; CPU time is what the gate itself costs.
t() {
  local TIMEFORMAT='%R s wall, %U s user + %S s sys'
  { time "$@" >/dev/null 2>&1; } 2>&1 || true
}

"$MW" gate --baseline "$W/b1.toml" --memory-analysis "$W/base.json" --update >/dev/null 2>&1
ms=$(t "$MW" gate --baseline "$W/b1.toml" --memory-analysis "$W/new.json" --max-increase-bytes 0 \
      --format markdown --junit-out "$W/j.xml")
"$MW" gate --baseline "$W/b1.toml" --memory-analysis "$W/new.json" --max-increase-bytes 0 --json >"$W/r.json" || true
reg=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['summary']['regressed'])" "$W/r.json")
echo "gate-500: memwatch-jax JSON, $N entries ($reg regressed): $ms"

FIX=testdata/gate-jax0.10.2/checkpoint/dump
mkdir "$W/dump"
for i in $(seq 0 $((N - 1))); do
  if (( i % 2 )); then src=module_0002.jit_predict; name=jit_predict; else src=module_0000.jit_train_step; name=jit_train_step; fi
  for f in "$FIX/$src".*; do
    suffix="${f#"$FIX/$src"}"
    sed "s/$name/jit_m$i/g" "$f" > "$W/dump/$(printf 'module_%04d' "$i").jit_m$i$suffix"
  done
done
bytes=$(du -sb "$W/dump" | cut -f1)
ms_u=$(t "$MW" gate --baseline "$W/b2.toml" --xla-dump "$W/dump" --update)
ms=$(t "$MW" gate --baseline "$W/b2.toml" --xla-dump "$W/dump" --format markdown --junit-out "$W/j2.xml")
n2=$(grep '^\[entries\.' "$W/b2.toml" | grep -vc '\.ops\]$')
echo "gate-500: XLA dumps, $n2 modules, $((bytes / 1000000)) MB of dump text: $ms (update run: $ms_u)"
echo "gate-500: machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
