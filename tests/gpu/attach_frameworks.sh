#!/usr/bin/env bash
# `memwatch attach` on a running PyTorch and a running JAX (XLA_PYTHON_CLIENT_ALLOCATOR=platform)
# program on an NVIDIA GPU: what the capture holds versus the framework's own counters in
# the attach window, the pause, and that the program runs on unaffected.
#   tests/gpu/attach_frameworks.sh MEMWATCH_BIN SHIM.so [OUTDIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="${1:?usage: $0 MEMWATCH_BIN SHIM.so [OUTDIR]}"; shim="${2:?shim}"; out="${3:-/tmp/mw-attach}"
py="${PYTHON:-python3}"; mkdir -p "$out"
for kind in torch jax; do
  echo "=== $kind"
  env XLA_PYTHON_CLIENT_ALLOCATOR=platform PYTHONUNBUFFERED=1 "$py" "$here/attach_frameworks.py" "$kind" "$out/$kind.log" 25 \
      > "$out/$kind.out" 2> "$out/$kind.err" &
  pid=$!
  sleep 12   # let the framework initialise and reach its steady loop
  "$mw" attach "$pid" --shim "$shim" --duration 5s --out "$out/$kind.mwcap" --json > "$out/$kind.attach.json" 2> "$out/$kind.attach.err"
  echo "  attach exit $?"; tail -3 "$out/$kind.attach.err" | sed 's/^/  attach: /'
  wait "$pid"; echo "  program exit $? ($(cat "$out/$kind.out"))"
  "$py" - "$out/$kind.attach.json" "$out/$kind.log" "$out/$kind.mwcap" "$mw" <<'PY'
import json, subprocess, sys
att = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2])]
rep = json.loads(subprocess.run([sys.argv[4], "report", sys.argv[3], "--json"], capture_output=True, text=True).stdout)
def find(o, key):
    if isinstance(o, dict):
        for k, v in o.items():
            if k == key: yield v
            else: yield from find(v, key)
    elif isinstance(o, list):
        for v in o: yield from find(v, key)
print("  attach figures:", {k: v for k, v in att.items() if not isinstance(v, (dict, list))})
allocs = sum(d.get("alloc_count", 0) for p in rep.get("processes", []) for d in p.get("devices", []))
frees = sum(d.get("free_count", 0) for p in rep.get("processes", []) for d in p.get("devices", []))
print(f"  capture: {allocs} device allocations, {frees} frees")
markers = list(find(att, "markers")) or list(find(rep, "markers"))
print("  markers/baseline:", json.dumps(markers)[:600])
if rows and "segments_allocated" in rows[0]:
    ts = [r["t"] for r in rows]
    print(f"  torch counters over the whole run: segments allocated {rows[-1]['segments_allocated']}, iterations {rows[-1]['i']+1}")
PY
done
