"""A JAX job for tests/gpu/attach_jax.sh: default (BFC) allocator, a leak, an OOM.

    attach_jax.py WORKDIR

Phases, each printing only lines that do not depend on timing (so an attached and a
plain run print the same):
  1. warm-up: compiles `jit_step` and `jit_leak_step`, runs 5 steps;
  2. idle until WORKDIR/go exists (small non-leaking steps; not printed);
  3. leak: each step keeps a new 256 MiB array produced by `jit_leak_step` alive until
     the pool is exhausted; the RESOURCE_EXHAUSTED error is caught and printed with the
     step it happened at;
  4. idle until WORKDIR/detached exists, then 10 more steps after the leak is dropped;
  5. exits with code 7 (a code of its own, to check it is passed through unchanged).
The pool is 10 % of the GPU (XLA_PYTHON_CLIENT_MEM_FRACTION, set by the shell script),
so the OOM comes after a few dozen steps on an H100 / H200.
"""
import os
import sys
import time

import jax
import jax.numpy as jnp

work = sys.argv[1]
LEAK_MIB = 256
n = LEAK_MIB * (1 << 20) // 4


@jax.jit
def step(x):
    return (x * 1.0001 + 1.0).sum()


@jax.jit
def leak_step(seed):
    return jnp.full((n,), seed, dtype=jnp.float32) + jnp.arange(n, dtype=jnp.float32) * 0.0


def wait_for(name):
    x = jnp.ones((1 << 20,), jnp.float32)
    while not os.path.exists(os.path.join(work, name)):
        step(x).block_until_ready()
        time.sleep(0.05)


x = jnp.ones((1 << 20,), jnp.float32)
for i in range(5):
    print(f"warm {i} {float(step(x)):.1f}", flush=True)
print("ready", flush=True)
wait_for("go")
kept = []
oom_at = None
for i in range(10_000):
    try:
        a = leak_step(float(i))
        a.block_until_ready()
    except Exception as e:  # XlaRuntimeError: RESOURCE_EXHAUSTED
        oom_at = i
        print(f"oom at step {i}: {type(e).__name__} RESOURCE_EXHAUSTED={'RESOURCE_EXHAUSTED' in str(e)}", flush=True)
        break
    kept.append(a)
    print(f"leak {i} kept={len(kept)}", flush=True)
del kept
wait_for("detached")
for i in range(10):
    print(f"after {i} {float(step(x)):.1f}", flush=True)
print(f"done oom_at={oom_at}", flush=True)
sys.exit(7)
