#!/usr/bin/env bash
# memwatch's own device readings (NVML) under `memwatch run`, checked against what two
# real processes hold on one NVIDIA GPU:
#   1. torch: a second process (not under memwatch) holds HOLD_GIB; the run's PyTorch
#      program allocates RUN_GIB, holds it, then asks for more than the GPU has (a
#      failed allocation) and exits 0.
#   2. jax: a second process holds JAX_HOLD_GIB (most of the GPU); JAX's preallocation is
#      refused and it settles on a smaller pool, runs, exits 0 (the "recovered run").
# Checks (PASS/FAIL lines): readings at least every 100 ms (+ READ_SLACK_MS for the
# NVML calls themselves), a reading at the failure, the other process's bytes as NVML
# lists them within [held, held + CTX_GIB], the run's own bytes at the same instant
# within [allocated, allocated + CTX_GIB], device used = run + others at every
# instant, and `memwatch report --json`'s "outside the run" peak within
# [held, held + CTX_GIB + RESERVE_GIB] (never the device's maximum minus the run's
# bytes at another time). The readings are decoded here from the capture's frames
# (type 12, a second reading of the documented layout).
#
#   bash tests/gpu/device_sampling.sh [MEMWATCH] [OUTDIR]
#   (defaults: target/release/memwatch, /tmp/memwatch-device-sampling; GPU 0)
set -uo pipefail
cd "$(dirname "$0")/../.."
mw="$(readlink -f "${1:-target/release/memwatch}")"
out="${2:-/tmp/memwatch-device-sampling}"
py="${PYTHON:-python3}"
HOLD_GIB="${HOLD_GIB:-8}"
RUN_GIB="${RUN_GIB:-4}"
JAX_HOLD_GIB="${JAX_HOLD_GIB:-100}"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
mkdir -p "$out"
fail=0
verdict() { # name ok detail
  if [ "$2" = 1 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; fail=1; fi
}

# A process outside memwatch holding GIB on the GPU until its stop file appears.
hold() { # gib name
  rm -f "$out/$2.ready" "$out/$2.stop"
  "$py" - "$1" "$out/$2.ready" "$out/$2.stop" <<'PY' &
import os, sys, time, torch
gib, ready, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
open(ready, "w").write(f"{os.getpid()} {gib << 30}\n")
while not os.path.exists(stop):
    time.sleep(0.05)
PY
  holder=$!
  for _ in $(seq 600); do [ -s "$out/$2.ready" ] && break; sleep 0.1; done
  [ -s "$out/$2.ready" ] || { echo "FAIL $2: the holder did not start"; kill "$holder"; exit 1; }
}
unhold() { touch "$out/$1.stop"; wait "$holder" 2>/dev/null; }

check() { # name capture timeline held_bytes_file run_bytes
  "$mw" report --json "$2" >"$out/$1.report.json" 2>"$out/$1.report.err"
  "$py" - "$1" "$2" "$3" "$4" "$5" "$out/$1.report.json" "${READ_SLACK_MS:-20}" \
    "${CTX_GIB:-1}" "${RESERVE_GIB:-2}" <<'PY'
import json, struct, sys
name, cap, timeline, held_file, run_bytes, report, slack, ctx_gib, reserve_gib = sys.argv[1:]
run_bytes, slack_ns = int(run_bytes), int(slack) * 1_000_000
ctx, reserve = int(float(ctx_gib) * 2**30), int(float(reserve_gib) * 2**30)
holder_pid, held = map(int, open(held_file).read().split())
marks = dict(l.split() for l in open(timeline))
marks = {k: int(v) for k, v in marks.items()}
GIB = 2**30
def gib(b): return f"{b / GIB:.2f} GiB"

# device_reading frames (type 12) of the capture.
data = open(cap, "rb").read()
assert data[:8] == b"MWCAP\0\r\n", "not a capture"
readings, at = [], 16
while at + 9 <= len(data):
    n, ty = struct.unpack_from("<IB", data, at)
    p = data[at + 5: at + 4 + n]
    at += 4 + n + 4
    if ty != 12:
        continue
    ts, dev, vendor, flags, used, total = struct.unpack_from("<QiBIQQ", p, 0)
    o = 33
    strs = []
    for _ in range(3):
        (k,) = struct.unpack_from("<H", p, o); strs.append(p[o + 2:o + 2 + k].decode()); o += 2 + k
    (count,) = struct.unpack_from("<H", p, o); o += 2
    procs = [struct.unpack_from("<IIQ", p, o + 16 * i) for i in range(count)]
    readings.append(dict(ts=ts, dev=dev, flags=flags, used=used, total=total, source=strs[0],
                         procs=[dict(pid=a, watched=bool(f & 1), known=bool(f & 2), bytes=b)
                                for a, f, b in procs] if flags & 1 else None))
out = []
def verdict(what, ok, detail):
    out.append(ok)
    print(f"{'PASS' if ok else 'FAIL'} {name} {what}: {detail}")

verdict("readings recorded", len(readings) > 0, f"{len(readings)} device_reading frames")
if not readings:
    sys.exit(1)
# The device the run used: where its processes were listed.
devs = sorted({r["dev"] for r in readings if r["procs"] and any(p["watched"] for p in r["procs"])})
verdict("run's processes listed", len(devs) == 1, f"on NVML device(s) {devs}")
dev = devs[0] if devs else readings[0]["dev"]
rs = sorted((r for r in readings if r["dev"] == dev), key=lambda r: r["ts"])
periodic = [r for r in rs if not r["flags"] & 2]
gaps = [b["ts"] - a["ts"] for a, b in zip(periodic, periodic[1:])]
worst = max(gaps) if gaps else None
verdict("every <= 100 ms", worst is not None and worst <= 100_000_000 + slack_ns,
        f"{len(periodic)} periodic readings, longest gap {worst / 1e6 if worst else float('nan'):.1f} ms "
        f"(allowed {100 + slack_ns / 1e6:.0f} ms), median {sorted(gaps)[len(gaps) // 2] / 1e6 if gaps else float('nan'):.1f} ms")
flagged = [r for r in rs if r["flags"] & 2]
if "failed_ns" in marks:
    after = [r["ts"] - marks["failed_ns"] for r in flagged if r["ts"] >= marks["asked_ns"]]
    verdict("reading at the failure", bool(after),
            f"{len(after)} reading(s) flagged at a failure, the first {min(after) / 1e6 if after else float('nan'):.1f} ms after the failed call returned")
else:
    verdict("readings at the refusals", bool(flagged),
            f"{len(flagged)} reading(s) flagged at a failed allocation (JAX's refused preallocation)")
# The hold window: the run holds run_bytes, the holder held.
win = [r for r in rs if marks["held_ns"] <= r["ts"] <= marks["release_ns"] and r["procs"] is not None]
verdict("readings in the hold window", len(win) >= 5, f"{len(win)} readings with processes")
bad_own, bad_other, bad_sum = [], [], []
for r in win:
    own = sum(p["bytes"] for p in r["procs"] if p["watched"] and p["known"])
    other = [p for p in r["procs"] if p["pid"] == holder_pid]
    if not (run_bytes <= own <= run_bytes + ctx):
        bad_own.append(own)
    if not other or not (held <= other[0]["bytes"] <= held + ctx):
        bad_other.append(other[0]["bytes"] if other else None)
    listed = sum(p["bytes"] for p in r["procs"] if p["known"])
    if not (listed <= r["used"] <= listed + reserve):
        bad_sum.append((r["used"], listed))
w0 = win[len(win) // 2] if win else None
own0 = sum(p["bytes"] for p in w0["procs"] if p["watched"]) if w0 else 0
oth0 = next((p["bytes"] for p in w0["procs"] if p["pid"] == holder_pid), 0) if w0 else 0
verdict("own bytes at the instant", win and not bad_own,
        f"run allocated {gib(run_bytes)}; NVML at t={w0['ts'] if w0 else '-'}: {gib(own0)}; {len(bad_own)} readings outside [{gib(run_bytes)}, +{gib(ctx)}] {bad_own[:3]}")
verdict("other process's bytes", win and not bad_other,
        f"holder pid {holder_pid} allocated {gib(held)}; NVML at the same instant: {gib(oth0)}; {len(bad_other)} readings outside [{gib(held)}, +{gib(ctx)}] {bad_other[:3]}")
verdict("device = processes + reserve", win and not bad_sum,
        f"{len(bad_sum)} readings where device used is not the listed processes plus at most {gib(reserve)} {bad_sum[:3]}")
rep = json.load(open(report))["device_readings"]
d = next((x for x in rep["devices"] if x["device"] == dev), None)
peak = d and d["others_peak_bytes"]
verdict("report: outside the run", rep["status"] == "recorded" and peak is not None and held <= peak <= held + ctx + reserve,
        f"status {rep['status']}, others peak {gib(peak) if peak else None} (holder {gib(held)}), run's own then {gib(d['watched_at_others_peak_bytes']) if d and d['watched_at_others_peak_bytes'] is not None else None}, device used max {gib(d['used_max_bytes']) if d else None}")
sys.exit(0 if all(out) else 1)
PY
}

# 1. PyTorch next to a holder.
hold "$HOLD_GIB" torch_holder
"$mw" run --quiet --no-xla-dump --out "$out/torch.mwcap" -- "$py" - "$RUN_GIB" "$out/torch.timeline" <<'PY'
import sys, time, torch
gib, timeline = int(sys.argv[1]), sys.argv[2]
t = {}
x = torch.empty(gib << 30, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
t["held_ns"] = time.monotonic_ns()           # CLOCK_MONOTONIC, the readings' clock
time.sleep(2.0)
t["release_ns"] = time.monotonic_ns()
t["asked_ns"] = time.monotonic_ns()
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError:
    t["failed_ns"] = time.monotonic_ns()
time.sleep(0.5)
open(timeline, "w").write("".join(f"{k} {v}\n" for k, v in t.items()))
PY
rc=$?
unhold torch_holder
verdict "torch run" "$([ $rc = 0 ] && echo 1 || echo 0)" "memwatch run exit $rc"
# PyTorch's caching allocator reserves exactly the request for a 4 GiB tensor.
check torch "$out/torch.mwcap" "$out/torch.timeline" "$out/torch_holder.ready" $((RUN_GIB << 30)) || fail=1

# 2. JAX whose preallocation is refused: it settles on a smaller pool.
hold "$JAX_HOLD_GIB" jax_holder
"$mw" run --quiet --no-xla-dump --out "$out/jax.mwcap" -- "$py" - "$out/jax.timeline" <<'PY'
import sys, time
t = {}
import jax, jax.numpy as jnp
x = jnp.ones((1 << 28,), jnp.float32).block_until_ready()   # 1 GiB inside the pool
stats = jax.devices()[0].memory_stats() or {}
t["held_ns"] = time.monotonic_ns()
time.sleep(2.0)
t["release_ns"] = time.monotonic_ns()
t["pool_bytes"] = stats.get("pool_bytes", stats.get("bytes_limit", 0))
open(sys.argv[1], "w").write("".join(f"{k} {v}\n" for k, v in t.items()))
PY
rc=$?
unhold jax_holder
verdict "jax run" "$([ $rc = 0 ] && echo 1 || echo 0)" "memwatch run exit $rc"
pool=$(awk '$1=="pool_bytes"{print $2}' "$out/jax.timeline" 2>/dev/null)
echo "jax: pool as JAX reports it: ${pool:-?} bytes"
# The run's own bytes are its pool (what JAX settled on) plus its context.
CTX_GIB="${JAX_CTX_GIB:-2}" check jax "$out/jax.mwcap" "$out/jax.timeline" "$out/jax_holder.ready" "${pool:-0}" || fail=1

[ "$fail" = 0 ] && echo "device_sampling: ok" || echo "device_sampling: FAILED"
exit "$fail"
