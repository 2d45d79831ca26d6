#!/usr/bin/env bash
# `memwatch attach` sees JAX (issue 23 item 4), on one NVIDIA GPU with JAX (CUDA):
# a job on the default (BFC) allocator (pool at 10 % of the GPU) is attached to while it
# idles, then leaks 256 MiB per step until the pool is exhausted, catches the OOM, is
# detached, runs 10 more steps and exits 7 (tests/gpu/attach_jax.py). The same job runs
# once without memwatch first. Checks (exit 1 when one fails):
#   - the attached job's stdout and exit code equal the plain run's (7), and it ran on
#     normally after the detach ("after 9", "done");
#   - the capture (memwatch runtime --json) holds the PJRT wrapping's records: the
#     leaking executable (jit_leak_step) with executions, allocator samples whose
#     bytes_in_use grew by at least 10 leak steps, an OOM naming jit_leak_step, and the
#     pre-attach baseline markers (allocator sample, live buffers);
#   - the attach start marker says the live PJRT table was wrapped.
# Usage: tests/gpu/attach_jax.sh MEMWATCH_BIN SHIM.so OUTDIR
#   (release binaries of this branch: .devcarry/bin/memwatch and
#    .devcarry/bin/libmemwatch_preload.so)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="$(readlink -f "${1:?usage: $0 MEMWATCH_BIN SHIM.so OUTDIR}")"
shim="$(readlink -f "${2:?shim}")"
out="${3:?output folder}"
py="${PYTHON:-python3}"
mkdir -p "$out"
out="$(readlink -f "$out")"
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.10 PYTHONUNBUFFERED=1
unset XLA_PYTHON_CLIENT_ALLOCATOR XLA_PYTHON_CLIENT_PREALLOCATE
{ echo "date: $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$py" -c 'import jax; print("jax", jax.__version__, jax.devices())'; } > "$out/env.txt" 2>&1
cat "$out/env.txt"

wait_line() { # file pattern timeout_s
  local end=$((SECONDS + $3))
  until grep -q "$2" "$1" 2>/dev/null; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

run_job() { # dir attach(0|1)
  local dir="$1" attach="$2"
  rm -rf "$dir"; mkdir -p "$dir"
  "$py" "$here/attach_jax.py" "$dir" > "$dir/stdout" 2> "$dir/stderr" &
  local pid=$!
  wait_line "$dir/stdout" '^ready' 180 || { echo "  $dir: job never got ready"; kill "$pid"; return 1; }
  local apid=""
  if [ "$attach" = 1 ]; then
    "$mw" attach "$pid" --shim "$shim" --duration 600s --out "$dir/attach.mwcap" --json \
      > "$dir/attach.json" 2> "$dir/attach.err" &
    apid=$!
    # Attached once the start marker is in the capture.
    local end=$((SECONDS + 120))
    until "$py" "$here/attach_jax_markers.py" "$dir/attach.mwcap" 2>/dev/null | grep -q '^memwatch-attach start'; do
      [ "$SECONDS" -lt "$end" ] || { echo "  no attach start marker after 120 s"; break; }
      kill -0 "$apid" 2>/dev/null || { echo "  attach ended early"; break; }
      sleep 0.5
    done
  fi
  touch "$dir/go"
  wait_line "$dir/stdout" '^oom at' 300 || echo "  $dir: no OOM line"
  if [ -n "$apid" ]; then
    sleep 2
    kill -INT "$apid"
    wait "$apid"; echo "  attach exit $?"
    tail -5 "$dir/attach.err" | sed 's/^/  attach: /'
  fi
  touch "$dir/detached"
  wait "$pid"; echo "$?" > "$dir/exit_code"
  echo "  $dir: job exit $(cat "$dir/exit_code"), $(wc -l < "$dir/stdout") lines"
}

echo "=== plain run"
run_job "$out/plain" 0
echo "=== attached run"
run_job "$out/attached" 1
"$mw" runtime --json "$out/attached/attach.mwcap" > "$out/attached/runtime.json" 2> "$out/attached/runtime.err"
"$mw" report --json "$out/attached/attach.mwcap" > "$out/attached/report.json" 2> "$out/attached/report.err"

HERE="$here" "$py" - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]
p, a = os.path.join(out, "plain"), os.path.join(out, "attached")
read = lambda d, f: open(os.path.join(d, f)).read()
ok = True
def check(what, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(f"  {'ok  ' if cond else 'FAIL'} {what}" + (f": {detail}" if detail else ""))

check("job output unchanged by the attach", read(p, "stdout") == read(a, "stdout"),
      f"plain {len(read(p, 'stdout').splitlines())} lines, attached {len(read(a, 'stdout').splitlines())}")
check("exit code unchanged (7)", read(p, "exit_code").strip() == read(a, "exit_code").strip() == "7",
      f"plain {read(p, 'exit_code').strip()}, attached {read(a, 'exit_code').strip()}")
check("ran on normally after the detach", "after 9" in read(a, "stdout") and "done oom_at=" in read(a, "stdout"))
check("the job hit its OOM", "oom at step" in read(a, "stdout"))
rt = json.load(open(os.path.join(a, "runtime.json")))
procs = rt.get("processes", [])
exes = [x for pr in procs for x in pr.get("executables", [])]
leak = [x for x in exes if x.get("name") == "jit_leak_step"]
check("the leaking executable is in the capture with executions", leak and leak[0].get("executions", 0) >= 10,
      json.dumps([(x["name"], x.get("executions")) for x in exes])[:300])
devs = [d for pr in procs for d in pr.get("devices", [])]
leak_bytes = 256 << 20
grew = [(d["device"], d.get("samples"), (d.get("first") or {}).get("bytes_in_use", 0),
         (d.get("peak") or {}).get("peak_bytes_in_use", 0)) for d in devs]
check("allocator samples show the growth (>= 10 leak steps)",
      any(peak - first >= 10 * leak_bytes for _, _, first, peak in grew),
      "(device, samples, first bytes_in_use, peak): " + json.dumps(grew))
ooms = [o for pr in procs for o in pr.get("ooms", [])]
check("the OOM is in the capture and names the executable", any(o.get("executable") == "jit_leak_step" for o in ooms),
      json.dumps(ooms)[:400])
import subprocess

markers = subprocess.run([sys.executable, os.path.join(os.environ["HERE"], "attach_jax_markers.py"),
                          os.path.join(a, "attach.mwcap")], capture_output=True, text=True).stdout.splitlines()
start = next((m for m in markers if m.startswith("memwatch-attach start")), "")
check("attach start marker says the PJRT table was wrapped", "pjrt_table=wrapped" in start, start[-160:])
stop = next((m for m in markers if m.startswith("memwatch-attach stop")), "")
check("detach restored the table", "restored_pjrt_slots=" in stop and "restored_pjrt_slots=0 " not in stop, stop)
check("pre-attach baseline: an allocator sample", any(m.startswith("pre-attach-pjrt-sample") for m in markers),
      next((m for m in markers if m.startswith("pre-attach-pjrt-sample")), ""))
check("pre-attach baseline: the live buffers", any(m.startswith("pre-attach-pjrt-buffers") for m in markers),
      next((m for m in markers if m.startswith("pre-attach-pjrt-buffers")), ""))
print("attach_jax:", "all checks passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
