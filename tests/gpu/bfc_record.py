#!/usr/bin/env python3
"""Drive the real XLA BFC allocator with a seeded random alloc/free sequence and record
its statistics after every step (generalises testdata/h200/bfc/bfc_validate.py).

Usage: bfc_record.py SEED OUT.json [--steps N] [--profile mixed|small|large|churn]

The pool mode and size come from the environment, as for any JAX program:
XLA_CLIENT_MEM_FRACTION (or XLA_PYTHON_CLIENT_MEM_FRACTION) and
XLA_PYTHON_CLIENT_PREALLOCATE. The output has the same shape as bfc_validate.py's, so
`memwatch replay OUT.json --steps --json` reads it directly.
"""
import argparse
import json
import os
import random

import numpy as np
import jax

ap = argparse.ArgumentParser()
ap.add_argument("seed", type=int)
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=600)
ap.add_argument("--profile", default="mixed", choices=["mixed", "small", "large", "churn"])
a = ap.parse_args()

rng = random.Random(a.seed)
dev = jax.devices()[0]
assert dev.platform == "gpu", f"needs a GPU device, got {dev}"


def sample_size():
    r = rng.random()
    if a.profile == "small":
        if r < 0.7:
            return rng.randrange(1, 1 << 16)
        return rng.randrange(1 << 16, 8 << 20)
    if a.profile == "large":
        if r < 0.1:
            return rng.randrange(1, 1 << 20)
        return rng.randrange(64 << 20, 1024 << 20)
    # mixed and churn: bfc_validate.py's distribution
    if r < 0.3:
        return rng.randrange(1, 1 << 20)
    if r < 0.8:
        return rng.randrange(1 << 20, 256 << 20)
    return rng.randrange(256 << 20, 1536 << 20)


free_p = 0.6 if a.profile == "churn" else 0.42
live, steps = {}, []
s0 = dev.memory_stats()
nid, oom_at = 0, None


def stats():
    st = dev.memory_stats()
    return {"bytes_in_use": st["bytes_in_use"], "largest_free_block_bytes": st.get("largest_free_block_bytes"),
            "num_allocs": st["num_allocs"]}


for i in range(a.steps):
    if live and rng.random() < free_p:
        k = rng.choice(sorted(live))
        live.pop(k).delete()
        steps.append({"op": "free", "id": k, "ok": True, **stats()})
        continue
    n = sample_size()
    try:
        x = jax.device_put(np.empty(n, np.uint8), dev)
        x.block_until_ready()
        live[nid] = x
        steps.append({"op": "alloc", "id": nid, "size": n, "ok": True, **stats()})
    except Exception as e:  # RESOURCE_EXHAUSTED
        steps.append({"op": "alloc", "id": nid, "size": n, "ok": False, "error": str(e)[:300], **stats()})
        oom_at = len(steps) - 1
        break
    nid += 1

env = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "TF_"))}
json.dump({"seed": a.seed, "profile": a.profile, "jax": jax.__version__, "device": dev.device_kind,
           "env": env, "initial_stats": s0, "final_stats": dev.memory_stats(), "oom_step": oom_at,
           "steps": steps}, open(a.out, "w"))
print("seed", a.seed, "profile", a.profile, "steps", len(steps), "oom_step", oom_at)
