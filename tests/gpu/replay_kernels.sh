#!/usr/bin/env bash
# GPU test and benchmark of memwatch's replay kernels and GPU replay runner (issue 10).
# Needs: an NVIDIA GPU, nvcc, python3, and a built memwatch (MEMWATCH=path, default
# target/release/memwatch). Run from anywhere; paths are relative to this checkout (or to a
# copy with the same layout: kernels/, tests/gpu/, testdata/h200/bfc/).
#
# It builds the CUDA kernels, replays the H200 BFC fixture bfc_seed12.json in bfc and
# driver modes (memwatch replay --on-gpu), emulates an 80 GB device on an H200 (a 40 GB one on a smaller GPU), runs an
# MI300X-sized run scaled down, interrupts a run with SIGINT, and prints the benchmark:
# allocation events per second in driver and bfc modes and the touch kernel's bandwidth as
# a fraction of a device-to-device copy's (target >= 80%). Exit 1 if a check failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
MW="${MEMWATCH:-$root/target/release/memwatch}"
work="${WORK:-$(mktemp -d)}"
fixture="$root/testdata/h200/bfc/h200-jax0.11.2/bfc_seed12.json"
mkdir -p "$work"
fail=0
say() { printf '\n== %s\n' "$*"; }

say "device"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | tr -d ' ')

say "build CUDA kernels (kernels/build-cuda.sh)"
bash "$root/kernels/build-cuda.sh" "$work/replay_kernels.fatbin" || { echo "FAIL: nvcc build"; exit 1; }
K=(--kernels "$work/replay_kernels.fatbin")

# Synthetic traces: 40 x 4 GiB (no frees), and a churn trace for the allocation rate.
python3 - "$work" <<'PY'
import json, random, sys
w = sys.argv[1]
with open(f"{w}/big.jsonl", "w") as f:
    for i in range(40):
        f.write(json.dumps({"op": "alloc", "id": i, "size": 4 << 30}) + "\n")
rng = random.Random(7)
with open(f"{w}/churn.jsonl", "w") as f:
    live, nid = [], 0
    for _ in range(20000):
        if live and (len(live) >= 512 or rng.random() < 0.45):
            f.write(json.dumps({"op": "free", "id": live.pop(rng.randrange(len(live)))}) + "\n")
        else:
            f.write(json.dumps({"op": "alloc", "id": nid, "size": rng.randrange(4096, 8 << 20)}) + "\n")
            live.append(nid); nid += 1
with open(f"{w}/churn_long.jsonl", "w") as f:
    live, nid = [], 0
    for _ in range(400000):
        if live and (len(live) >= 256 or rng.random() < 0.45):
            f.write(json.dumps({"op": "free", "id": live.pop(rng.randrange(len(live)))}) + "\n")
        else:
            f.write(json.dumps({"op": "alloc", "id": nid, "size": rng.randrange(4096, 1 << 20)}) + "\n")
            live.append(nid); nid += 1
PY

summary() { # name file
python3 - "$1" "$2" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
try:
    d = json.load(open(path))["on_gpu"]
except Exception as e:
    print(f"{name}: no report ({e})"); sys.exit(0)
g = lambda b: f"{b/2**30:.2f} GiB"
r, p, pl, t = d["real"], d["prediction"], d["plan"], d["timing"]
print(f"{name}: {d['device']['name']} {d['device']['arch']} mode={d['mode']} touch={d['touch']}")
if pl["target_bytes"] is not None:
    print(f"  emulated target {g(pl['target_bytes'])}: divisor {pl['scale_divisor']}, ballast {g(d['ballast']['allocated_bytes'])}, free for trace {d['ballast']['free_after_bytes']} B (capacity {pl['capacity_bytes']} B)")
if d.get("pool_bytes"): print(f"  bfc region {d['pool_bytes']} B")
oe = r["oom_event"]
print(f"  real : fits={r['fits']} oom_step={r['oom_step']}" + (f" (id {oe['id']}, {oe['size']} B)" if oe else "") + f" allocs={r['allocs']} frees={r['frees']} verified={r['buffers_verified']} mismatches={r['checksum_mismatches']} interrupted={r['interrupted']}")
print(f"  model: {p['allocator']} fits={p['fits']} oom_step={p['oom_step']} pool={p['pool_bytes']} B peak_in_use={p['peak_bytes_in_use']} B")
print(f"  agrees={d['agrees']}  time {t['total_seconds']:.3f} s, alloc/free {t['alloc_free_seconds']*1e3:.2f} ms -> {t['events_per_second']:.0f} events/s, kernels {t['kernel_seconds']:.3f} s")
mb, ma = d["memory_before"], d["memory_after"]
print(f"  device free before {mb['free_bytes']} B, after {ma['free_bytes']} B (total {mb['total_bytes']} B); cleanup freed {d['cleanup_freed']}, errors {d['cleanup_errors']}")
if d.get("bandwidth"):
    b = d["bandwidth"]
    print(f"  bandwidth: touch {b['touch_bytes_per_second']/1e9:.0f} GB/s, copy {b['copy_bytes_per_second']/1e9:.0f} GB/s (read+write) -> touch/copy = {b['touch_fraction_of_copy']*100:.1f}%")
for n in d["notes"]: print(f"  note: {n}")
PY
}

check() { # name file python-condition description
python3 - "$2" "$3" <<'PY' && echo "PASS: $1: $4" || { echo "FAIL: $1: $4"; return 1; }
import json, sys
d = json.load(open(sys.argv[1]))["on_gpu"]
r, p = d["real"], d["prediction"]
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

mwrun() { # name args...
local name=$1; shift
"$MW" replay "$@" --on-gpu "${K[@]}" --json >"$work/$name.json" 2>"$work/$name.err"
local rc=$?
echo "[$name] exit $rc"; cat "$work/$name.err"
summary "$name" "$work/$name.json"
return 0
}
freed='d["memory_after"]["free_bytes"] + (64<<20) >= d["memory_before"]["free_bytes"]'

say "1. bfc mode: bfc_seed12.json, the recording's pool (6006243328 B), touch + strided + checksums"
mwrun bfc_seed12 "$fixture" --touch --strided-passes 2
check bfc_seed12 "$work/bfc_seed12.json" 'r["oom_step"] == p["oom_step"] == 46 and r["checksum_mismatches"] == 0' "real OOM at event 46 = model = fixture's oom_step, data intact" || fail=1
check bfc_seed12 "$work/bfc_seed12.json" "$freed" "device memory returned" || fail=1

say "2. driver mode: bfc_seed12.json, one cuMemAlloc per buffer, emulated 3 GiB device"
mwrun driver_seed12 "$fixture" --allocator driver --emulate 3GiB --touch
check driver_seed12 "$work/driver_seed12.json" 'd["agrees"] and r["checksum_mismatches"] == 0' "real outcome = platform model's" || fail=1
check driver_seed12 "$work/driver_seed12.json" "$freed" "device memory returned" || fail=1

if [ "${total_mib:-0}" -gt 100000 ]; then emu=h100; else emu=40GB; fi
say "3. emulate a smaller device ($emu) with a ballast: 40 x 4 GiB, driver mode, touched"
mwrun emulate_small "$work/big.jsonl" --allocator driver --emulate "$emu" --touch
check emulate_small "$work/emulate_small.json" 'd["agrees"] and not r["fits"] and r["checksum_mismatches"] == 0' "OOM where the platform model says" || fail=1
check emulate_small "$work/emulate_small.json" "$freed" "device memory returned (ballast too)" || fail=1

say "4. MI300X-sized run scaled down: 40 x 4 GiB, bfc mode, JAX's 75% pool"
mwrun mi300x_scaled "$work/big.jsonl" --allocator bfc --emulate mi300x --mem-fraction 0.75 --touch
check mi300x_scaled "$work/mi300x_scaled.json" 'd["plan"]["scale_divisor"] > 1 and d["agrees"] and r["checksum_mismatches"] == 0' "scaled, and real = model" || fail=1

say "5. Ctrl-C: SIGINT during a touched churn replay"
"$MW" replay "$work/churn_long.jsonl" --on-gpu --allocator driver --emulate 64GiB --touch --strided-passes 2 "${K[@]}" --json >"$work/sigint.json" 2>"$work/sigint.err" &
pid=$!; sleep 2; kill -INT "$pid"; wait "$pid"; rc=$?
echo "[sigint] exit $rc"; cat "$work/sigint.err"; summary sigint "$work/sigint.json"
if [ "$rc" = 130 ]; then
  check sigint "$work/sigint.json" "r[\"interrupted\"] and $freed" "stopped between events, everything freed" || fail=1
else
  echo "NOTE: the run ended (exit $rc) before SIGINT arrived; interrupt not exercised"
fi

say "6. benchmark: allocation rate (churn, 20000 events, no touch) and touch bandwidth"
mwrun bench_driver "$work/churn.jsonl" --allocator driver --emulate 64GiB
mwrun bench_bfc "$work/churn.jsonl" --allocator bfc --capacity 16GiB --mem-fraction 1.0
mwrun bench_bw "$fixture" --bandwidth 4294967296
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def get(n):
    try: return json.load(open(f"{w}/{n}.json"))["on_gpu"]
    except Exception: return None
dr, bf, bw = get("bench_driver"), get("bench_bfc"), get("bench_bw")
print("BENCHMARK")
if dr: print(f"  driver mode : {dr['timing']['events_per_second']:,.0f} alloc+free events/s ({dr['real']['allocs']} allocs, {dr['real']['frees']} frees in {dr['timing']['alloc_free_seconds']*1e3:.1f} ms of driver calls)")
if bf: print(f"  bfc mode    : {bf['timing']['events_per_second']:,.0f} alloc+free events/s ({bf['real']['allocs']} allocs, {bf['real']['frees']} frees in {bf['timing']['alloc_free_seconds']*1e3:.1f} ms of model placement)")
if bw and bw.get("bandwidth"):
    b = bw["bandwidth"]; f = b["touch_fraction_of_copy"]
    print(f"  touch kernel: {b['touch_bytes_per_second']/1e9:.0f} GB/s written; device copy {b['copy_bytes_per_second']/1e9:.0f} GB/s (read+write); touch/copy = {f*100:.1f}% (target >= 80%: {'met' if f >= 0.8 else 'NOT met'})")
PY

say "result"
if [ "$fail" = 0 ]; then echo "all GPU checks passed"; else echo "some GPU checks FAILED"; fi
exit "$fail"
