#!/usr/bin/env bash
# `memwatch attach` on a running PyTorch and a running JAX (XLA_PYTHON_CLIENT_ALLOCATOR=platform)
# program on an NVIDIA GPU: what the capture holds versus the framework's own counters in
# the attach window, the pause, and that the program runs on unaffected. Fails (exit 1)
# when an attach fails, a program does not exit 0, or a capture holds no allocation or
# no free (PyTorch reaches cudaMalloc through its GOT; XLA through driver pointers kept
# in static data, which the shim's pointer scan redirects).
#   tests/gpu/attach_frameworks.sh MEMWATCH_BIN SHIM.so [OUTDIR]
set -uo pipefail
fail=0
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
  rc=$?; echo "  attach exit $rc"; tail -3 "$out/$kind.attach.err" | sed 's/^/  attach: /'
  [ "$rc" = 0 ] || fail=1
  wait "$pid"; prc=$?; echo "  program exit $prc ($(cat "$out/$kind.out"))"
  [ "$prc" = 0 ] || fail=1
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
for t in att.get("targets", []):
    print(f"  pid {t['pid']}: paused {t['pause_ns'] / 1e6:.1f} ms at attach, "
          f"{(t.get('detach_pause_ns') or 0) / 1e6:.1f} ms at detach")
    print("  shim:", t.get("hooked", "")[-400:])
allocs = sum(d.get("alloc_count", 0) for p in rep.get("processes", []) for d in p.get("devices", []))
frees = sum(d.get("free_count", 0) for p in rep.get("processes", []) for d in p.get("devices", []))
print(f"  capture: {allocs} device allocations, {frees} frees")
markers = list(find(att, "markers")) or list(find(rep, "markers"))
print("  markers/baseline:", json.dumps(markers)[:600])
if rows and "segments_allocated" in rows[0]:
    ts = [r["t"] for r in rows]
    print(f"  torch counters over the whole run: segments allocated {rows[-1]['segments_allocated']}, iterations {rows[-1]['i']+1}")
ok = allocs > 0 and frees > 0
print("  check:", "ok" if ok else "FAIL (no allocation or no free captured)")
sys.exit(0 if ok else 1)
PY
  [ $? = 0 ] || fail=1
done
[ "$fail" = 0 ] && echo "attach_frameworks: all checks passed" || echo "attach_frameworks: FAILED"
exit "$fail"
