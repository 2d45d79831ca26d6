#!/usr/bin/env bash
# Which GPU a process used, as the driver says it (issue 34 item 2), on an NVIDIA machine
# with PyTorch, JAX and nvidia-smi (no network needed). A small PyTorch program and a
# small JAX program run under `memwatch run`, once with CUDA_VISIBLE_DEVICES=0 and once
# with CUDA_VISIBLE_DEVICES=<GPU 0's UUID>; checks (one PASS/FAIL line each, exit 1 when
# one fails):
#   - the run exits 0 and its capture describes at least one device;
#   - every device the capture describes carries the UUID and PCI bus id that
#     `nvidia-smi --query-gpu=uuid,pci.bus_id` prints for GPU 0, after normalisation
#     (UUID: `GPU-` and lower-case hex; bus id: four-digit domain, lower-case hex — NVML
#     prints `00000000:18:00.0`, the CUDA driver `0000:18:00.0`);
#   - memwatch's own NVML readings of that GPU are paired with the run's device 0
#     (`device_readings.devices[].ordinal` of `memwatch report --json`).
# Usage: bash tests/gpu/device_identity.sh MEMWATCH_BIN SHIM.so OUTDIR
#   (release binaries of this branch: target/release/memwatch and
#    target/release/libmemwatch_preload.so). Writes OUTDIR/{torch,jax}-{index,uuid}.mwcap,
#   their reports (.json), stdout/stderr, and OUTDIR/summary.txt. Takes about a minute.
set -uo pipefail
mw="$(readlink -f "${1:?usage: $0 MEMWATCH_BIN SHIM.so OUTDIR}")"
shim="$(readlink -f "${2:?shim}")"
out="${3:?output folder}"
py="${PYTHON:-python3}"
mkdir -p "$out"
out="$(readlink -f "$out")"
export MEMWATCH_PRELOAD="$shim" PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
unset XLA_PYTHON_CLIENT_ALLOCATOR XLA_PYTHON_CLIENT_MEM_FRACTION CUDA_DEVICE_ORDER

smi="$(nvidia-smi -i 0 --query-gpu=uuid,pci.bus_id,name --format=csv,noheader)" || {
  echo "FAIL  nvidia-smi: no GPU 0"
  exit 1
}
uuid="$(echo "$smi" | cut -d, -f1 | tr -d ' ')"
bus="$(echo "$smi" | cut -d, -f2 | tr -d ' ')"
{ echo "date: $(date -u +%FT%TZ)"; echo "nvidia-smi GPU 0: $smi"
  "$py" -c 'import torch, jax; print("torch", torch.__version__, "jax", jax.__version__)' 2>&1; } > "$out/env.txt"
cat "$out/env.txt"

torch_prog='
import torch
x = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("torch device", torch.cuda.current_device(), torch.cuda.get_device_name(0), int(x.sum()))
'
jax_prog='
import jax, jax.numpy as jnp
x = jnp.ones((16 << 20,), jnp.float32).block_until_ready()
print("jax device", jax.devices()[0], float(x.sum()))
'

status=0
: > "$out/summary.txt"
for vis in index uuid; do
  [ "$vis" = index ] && cvd=0 || cvd="$uuid"
  for prog in torch jax; do
    name="$prog-$vis"
    [ "$prog" = torch ] && code="$torch_prog" || code="$jax_prog"
    CUDA_VISIBLE_DEVICES="$cvd" timeout 150 "$mw" run --quiet --no-xla-dump \
      --out "$out/$name.mwcap" -- "$py" -c "$code" > "$out/$name.stdout" 2> "$out/$name.stderr"
    rc=$?
    "$mw" report --json "$out/$name.mwcap" > "$out/$name.json" 2> "$out/$name.report.err"
    "$py" - "$out/$name.json" "$name" "$cvd" "$rc" "$uuid" "$bus" >> "$out/summary.txt" <<'PY'
import json, sys
path, name, cvd, rc, uuid, bus = sys.argv[1:7]

def norm_uuid(u):
    kind, _, body = u.strip().partition("-")
    return kind.upper() + "-" + body.lower()

def norm_bus(b):
    d, bn, df = b.strip().split(":")
    dev, fn = df.split(".")
    return f"{int(d, 16):04x}:{int(bn, 16):02x}:{int(dev, 16):02x}.{int(fn, 16):x}"

want = (norm_uuid(uuid), norm_bus(bus))
what = f"{name} (CUDA_VISIBLE_DEVICES={cvd})"
try:
    rep = json.load(open(path))
except Exception as e:  # noqa: BLE001 - reported as a failed check
    print(f"FAIL  {what}: no report ({e}); memwatch run exit {rc}")
    sys.exit(0)
devs = [(p["pid"], d) for p in rep["processes"] for d in p["devices"] if d["device"] >= 0]
got = sorted({(d.get("uuid"), d.get("pci_bus_id")) for _, d in devs if d.get("name") is not None})
ok_run = rc == "0" and bool(got)
print(f"{'PASS' if ok_run else 'FAIL'}  {what}: exit {rc}, {len(devs)} device rows, described {got}")
ok_id = bool(got) and all(g == want for g in got)
print(f"{'PASS' if ok_id else 'FAIL'}  {what}: recorded identity {got} == nvidia-smi {want}")
readings = rep.get("device_readings", {}).get("devices", [])
mine = [r for r in readings if (r.get("uuid"), r.get("pci_bus_id")) == want]
ok_r = bool(mine) and all(r.get("ordinal") == 0 for r in mine)
print(f"{'PASS' if ok_r else 'FAIL'}  {what}: NVML readings of the GPU paired with the run's device 0: "
      + ", ".join(f"nvml {r['device']} -> {r.get('ordinal')}" for r in readings))
PY
  done
done
cat "$out/summary.txt"
grep -q '^FAIL' "$out/summary.txt" && status=1
[ "$status" = 0 ] && echo "device_identity: all passed" || echo "device_identity: FAILED"
exit "$status"
