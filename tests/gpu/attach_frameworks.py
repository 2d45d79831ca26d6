"""Workloads for tests/gpu/attach_frameworks.sh: a PyTorch or JAX program that keeps
allocating and freeing device memory and logs, once per iteration, the framework's own
allocation counters with a CLOCK_MONOTONIC timestamp, so the attach window can be compared
with what `memwatch attach` captured.

usage: attach_frameworks.py torch|jax LOGFILE SECONDS
"""
import json, sys, time

kind, log_path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
deadline = time.monotonic() + seconds
log = open(log_path, "w", buffering=1)
i = 0
if kind == "torch":
    import torch
    keep = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # allocated before attach
    while time.monotonic() < deadline:
        t = torch.empty((32 << 20) + (i % 8) * (2 << 20), dtype=torch.uint8, device="cuda")
        t.fill_(1)
        del t
        torch.cuda.empty_cache()  # every iteration really reaches cudaMalloc / cudaFree
        s = torch.cuda.memory_stats()
        log.write(json.dumps({"t": time.monotonic_ns(), "i": i,
                              "segments_allocated": s["segment.all.allocated"],
                              "segments_freed": s["segment.all.freed"],
                              "reserved": s["reserved_bytes.all.current"]}) + "\n")
        i += 1
        time.sleep(0.01)
else:
    import jax, jax.numpy as jnp
    keep = jnp.ones((64 << 20,), dtype=jnp.uint8).block_until_ready()
    while time.monotonic() < deadline:
        a = jnp.full(((32 << 20) + (i % 8) * (2 << 20),), 1, dtype=jnp.uint8).block_until_ready()
        a.delete()
        log.write(json.dumps({"t": time.monotonic_ns(), "i": i,
                              "live_arrays": len(jax.live_arrays())}) + "\n")
        i += 1
        time.sleep(0.01)
print("done", i)
