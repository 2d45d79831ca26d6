"""A run that fits: FRAMEWORK does STEPS steps of work on MIB of memory and exits 0.
argv: FRAMEWORK MIB STEPS
"""
import sys
from gen_common import Figures

fig = Figures()
fw, size, steps = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3])
if fw == "jax":
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        return jnp.sin(x) * 0.5 + x * 0.5

    x = jnp.ones((size // 4,), jnp.float32)
    for _ in range(steps):
        x = step(x)
    x.block_until_ready()
elif fw == "torch":
    import torch
    x = torch.ones(size // 4, device="cuda")
    for _ in range(steps):
        x = torch.sin(x) * 0.5 + x * 0.5
    torch.cuda.synchronize()
else:
    import cupy as cp
    x = cp.ones(size // 4, dtype=cp.float32)
    for _ in range(steps):
        x = cp.sin(x) * 0.5 + x * 0.5
    cp.cuda.runtime.deviceSynchronize()
print("ok", flush=True)
