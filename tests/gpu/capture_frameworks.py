#!/usr/bin/env python3
"""GPU check of the memwatch shim against JAX, PyTorch and CuPy (run on an NVIDIA GPU).

Subcommands:
  workload jax|torch|cupy   run a small workload, print the framework's own memory
                            figures as one line `FRAMEWORK {json}` (with the
                            CLOCK_MONOTONIC time `mark_ns` at which they were read)
  compare CAPTURE OUTFILE   read a memwatch capture (.mwcap, parsed here with the wire
                            layout of agents/wire/src/frame.rs) and the workload's output,
                            print what the shim saw next to the framework's figures.
Used by capture_frameworks.sh.
"""
import json, os, struct, sys, time, zlib
from collections import Counter, defaultdict

KIND = {1: "alloc", 2: "free", 3: "alloc_failed", 4: "api_span", 5: "free_failed", 6: "set_device"}
MEM = {0: "none", 1: "device", 2: "host_pinned", 3: "managed", 4: "vmm_physical", 5: "vmm_map",
       6: "vmm_reserve", 7: "stream_pool", 8: "pool_object", 9: "pjrt_buffer"}
# wire frame types other than process_start (1) and events (2) (agents/wire/src/frame.rs)
FRAME_NAMES = {3: "device_info", 4: "marker", 5: "dropped", 6: "process_end", 7: "device_sample",
               8: "pjrt_executable", 9: "pjrt_memory_stats", 10: "backtrace", 11: "module_map"}
OCCUPIES = {1, 3, 4, 7}  # kinds counted as device memory (wire MemKind::occupies_device_memory)


def read_capture(path):
    data = open(path, "rb").read()
    assert data[:8] == b"MWCAP\0\r\n", f"{path}: not a memwatch capture"
    pos, events, starts, other = 16, [], [], Counter()
    while pos + 9 <= len(data):
        (ln,) = struct.unpack_from("<I", data, pos)
        body = data[pos + 4: pos + 4 + ln]
        if len(body) < ln:
            other["truncated"] += 1
            break
        (crc,) = struct.unpack_from("<I", data, pos + 4 + ln)
        if zlib.crc32(body) != crc:
            other["bad_crc"] += 1
        ty, payload = body[0], body[1:]
        if ty == 2:
            (n,) = struct.unpack_from("<I", payload, 0)
            for i in range(n):
                f = struct.unpack_from("<QQQQQQIIiiHBBI", payload, 4 + 72 * i)
                events.append(dict(ts=f[0], ptr=f[1], size=f[2], stream=f[3], aux=f[4], dur=f[5], pid=f[6],
                                   tid=f[7], result=f[8], device=f[9], api=f[10], kind=f[11], mem=f[12]))
        elif ty == 1:
            pid, ppid = struct.unpack_from("<II", payload, 0)
            starts.append(pid)
        else:
            other[FRAME_NAMES.get(ty, f"type{ty}")] += 1
            if ty == 5:
                _pid, _ts, total = struct.unpack_from("<IQQ", payload, 0)
                other["dropped_total"] = max(other["dropped_total"], total)
        pos += 4 + ln + 4
    return events, starts, other


API_NAMES = {}


def api_name(n):
    if not API_NAMES:
        src = os.path.join(os.path.dirname(__file__), "api_names.txt")
        if os.path.exists(src):
            for line in open(src):
                k, v = line.split()
                API_NAMES[int(k)] = v
    return API_NAMES.get(n, str(n))


def live_at(events, t_ns):
    """Device bytes live at time t (allocs minus frees of occupying kinds, keyed by ptr)."""
    live = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["ts"] > t_ns:
            break
        if e["mem"] not in OCCUPIES:
            continue
        if e["kind"] == 1:
            live[(e["mem"], e["ptr"])] = e["size"]
        elif e["kind"] == 2:
            live.pop((e["mem"], e["ptr"]), None)
    return len(live), sum(live.values())


def compare(cap, outfile):
    events, starts, other = read_capture(cap)
    fw = None
    for line in open(outfile, errors="replace"):
        if line.startswith("FRAMEWORK "):
            fw = json.loads(line[len("FRAMEWORK "):])
    by = Counter()
    bytes_by = Counter()
    for e in events:
        key = (api_name(e["api"]), KIND.get(e["kind"], e["kind"]), MEM.get(e["mem"], e["mem"]))
        by[key] += 1
        if e["kind"] == 1:
            bytes_by[key] += e["size"]
    print(f"  capture: {len(events)} events, processes {starts}, other frames {dict(other)}")
    for key, n in sorted(by.items(), key=lambda kv: -kv[1]):
        extra = f" {bytes_by[key] / 2**20:.1f} MiB" if bytes_by[key] else ""
        print(f"    {str(key[0]):40s} {str(key[1]):12s} {str(key[2]):12s} x{n}{extra}")
    if fw is None:
        print("  no FRAMEWORK line in the workload output")
        return
    n, b = live_at(events, fw["mark_ns"])
    print(f"  at the framework's reading: shim sees {n} live device allocations, {b} bytes ({b / 2**20:.1f} MiB)")
    for k, v in fw.items():
        if k != "mark_ns":
            print(f"  framework {k}: {v}")


def workload(which):
    if which == "jax":
        import jax, jax.numpy as jnp
        x = jnp.ones((4096, 4096), jnp.float32)  # 64 MiB
        f = jax.jit(lambda a: (a @ a).sum())
        f(x).block_until_ready()
        arrays = [jnp.full((1 << 20) * k, 1.0, jnp.float32) for k in range(1, 9)]  # 4..32 MiB
        for a in arrays:
            a.block_until_ready()
        live = jax.live_arrays()
        stats = jax.devices()[0].memory_stats() or {}
        out = dict(mark_ns=time.monotonic_ns(), allocator=os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default(bfc)"),
                   live_arrays=len(live), live_array_bytes=sum(a.nbytes for a in live),
                   bytes_in_use=stats.get("bytes_in_use"), peak_bytes_in_use=stats.get("peak_bytes_in_use"),
                   num_allocs=stats.get("num_allocs"), pool_bytes=stats.get("pool_bytes"),
                   bytes_reserved=stats.get("bytes_reserved"))
    elif which == "torch":
        import torch
        xs = [torch.empty(k << 20, dtype=torch.uint8, device="cuda") for k in (1, 3, 30, 100)]
        y = torch.randn(2048, 2048, device="cuda") @ torch.randn(2048, 2048, device="cuda")
        torch.cuda.synchronize()
        s = torch.cuda.memory_stats()
        out = dict(mark_ns=time.monotonic_ns(), segments=s.get("segment.all.current"),
                   reserved_bytes=s.get("reserved_bytes.all.current"), allocated_bytes=s.get("allocated_bytes.all.current"),
                   cuda_malloc_retries=s.get("num_alloc_retries"))
        del xs, y
    elif which == "cupy":
        import cupy
        xs = [cupy.zeros(k << 20, dtype=cupy.uint8) for k in (1, 5, 50)]
        cupy.cuda.Device().synchronize()
        pool = cupy.get_default_memory_pool()
        out = dict(mark_ns=time.monotonic_ns(), pool_total_bytes=pool.total_bytes(), pool_used_bytes=pool.used_bytes(),
                   n_free_blocks=pool.n_free_blocks())
        del xs
    else:
        sys.exit(f"unknown workload {which}")
    print("FRAMEWORK " + json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "workload":
        workload(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
