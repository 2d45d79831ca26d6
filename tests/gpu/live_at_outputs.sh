#!/usr/bin/env bash
# Execute outputs keep their index on a real GPU run, and the "live at" view groups the
# pool's live buffers by executable and op_name: a JAX step with three outputs
# (f32[N,M], f32[N], bf16[N,M]) kept for every step, run under `memwatch run --db` with
# its XLA dump attached, then read back from the database and from the daemon's page.
#   bash tests/gpu/live_at_outputs.sh MEMWATCH OUTDIR
set -euo pipefail
mw=$(realpath "$1"); out=$(realpath -m "$2"); mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
fail=0
for shape in "1024 768 6" "2048 384 9"; do
  set -- $shape; tag="n$1-m$2-s$3"; d="$out/$tag"; rm -rf "$d"; mkdir -p "$d"
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 "$mw" run --db "$d/mw.db" --xla-dump "$d/dump" -- \
    python3 "$here/live_at_outputs.py" "$1" "$2" "$3" > "$d/stdout" 2> "$d/stderr" || true
  tail -1 "$d/stdout"
  "$mw" import --db "$d/mw.db" --xla-dump "$d/dump" --run-id 1 > "$d/attach.txt" 2>&1 || cat "$d/attach.txt"
  port=$(( 7400 + RANDOM % 500 ))
  "$mw" serve --db "$d/mw.db" --listen 127.0.0.1:$port --ingest 127.0.0.1:$((port+1000)) > "$d/serve.log" 2>&1 &
  srv=$!
  for _ in $(seq 50); do python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1])" "http://127.0.0.1:$port/api/runs" 2>/dev/null && break; sleep 0.1; done
  python3 - "$d" "$port" "$1" "$2" "$3" <<'PY' || fail=1
import json, sqlite3, sys, urllib.request
d, port, n, m, steps = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
want = [n * m * 4, n * 4, n * m * 2]
db = sqlite3.connect(f"{d}/mw.db")
(t0,) = db.execute("SELECT t0_mono_ns FROM runs WHERE id = 1").fetchone()
rows = db.execute("SELECT b.output_index, b.size, COUNT(*), MAX(b.ts_ns) FROM pjrt_buffers b "
                  "JOIN pjrt_executables e ON e.run_id = b.run_id AND e.pid = b.pid AND e.handle = b.producer "
                  "WHERE b.run_id = 1 AND e.name = 'jit_step' AND b.api = 3007 GROUP BY 1, 2 ORDER BY 1").fetchall()
print("jit_step outputs (index, bytes, buffers):", [r[:3] for r in rows])
ok = [(r[0], r[1], r[2]) for r in rows] == [(i, want[i], steps) for i in range(3)]
last = max(r[3] for r in rows)
at = last - t0 + 50_000_000
with urllib.request.urlopen(f"http://127.0.0.1:{port}/runs/1/peak?device=0&at={at}&format=json") as r:
    page = json.load(r)
fw = [g for g in page["framework_live"] if g["executable"] == "jit_step"]
print("live at", at, "ns:", json.dumps(fw))
vals = fw[0]["values"] if fw else []
ok = ok and len(fw) == 1 and fw[0]["count"] == 3 * steps and fw[0]["bytes"] == steps * sum(want)
ok = ok and sum(v["count"] for v in vals) == 3 * steps and all(v["op_name"].startswith("jit(step)/") for v in vals)
print("PASS" if ok else "FAIL", d)
sys.exit(0 if ok else 1)
PY
  kill $srv; wait $srv 2>/dev/null || true
  rm -rf "$d/dump"/*.pb 2>/dev/null || true
done
exit $fail
