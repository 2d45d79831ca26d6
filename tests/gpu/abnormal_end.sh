#!/usr/bin/env bash
# A CUDA program that ends without exit(), under `memwatch run`: os.abort() (what
# LOG(FATAL) after an OOM does) and os._exit(3). Its last allocation (96 MiB through
# CuPy's cudaMalloc, made just before the end) must be in the capture, and the process's
# end must carry 134 (128 + SIGABRT) or 3. Exits non-zero on any miss.
#
#   tests/gpu/abnormal_end.sh MEMWATCH [OUTDIR]
set -uo pipefail
mw="$1"
out="${2:-/tmp/memwatch-abnormal-end}"
py="${PYTHON:-python3}"
mkdir -p "$out"
fail=0
for how in abort _exit; do
  cap="$out/$how.mwcap"
  rm -f "$cap"
  "$mw" run --out "$cap" -- "$py" -c "
import os, cupy
cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1 << 20))  # context made, flusher idle
import time; time.sleep(0.1)
cupy.cuda.runtime.malloc(96 << 20)
os.abort() if '$how' == 'abort' else os._exit(3)
" >"$out/$how.out" 2>"$out/$how.err"
  rc=$?
  "$mw" report --json "$cap" >"$out/$how.json" 2>"$out/$how.report.err"
  "$py" - "$out/$how.json" "$how" "$rc" <<'PY' || fail=1
import json, sys
doc, how, rc = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
want = 134 if how == "abort" else 3
p = doc["processes"][-1]
sizes_ok = p["peak_bytes"] >= 96 << 20
print(f"{how}: memwatch run exit {rc} (want {want}), process_end {p['exit_code']} (want {want}), "
      f"peak {p['peak_bytes']} bytes (want >= {96 << 20}), dropped {p['dropped_events']}")
sys.exit(0 if rc == want and p["exit_code"] == want and sizes_ok else 1)
PY
done
[ "$fail" = 0 ] && echo "abnormal_end: ok" || echo "abnormal_end: FAILED"
exit "$fail"
