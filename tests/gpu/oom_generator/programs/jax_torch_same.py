"""JAX and PyTorch in one process: JAX's preallocated pool (its default 75 %, or
XLA_CLIENT_MEM_FRACTION) is taken at JAX's first use, then PyTorch asks for more than the
device has left.  argv: TORCH_FRACTION_OF_DEVICE [FIRST=jax]
"""
import sys
from gen_common import Figures, jax_stats, torch_stats

fig = Figures()
want = float(sys.argv[1])
import jax
import jax.numpy as jnp

x = jnp.ones((1024, 1024), jnp.float32).block_until_ready()
fig.set("jax_stats", jax_stats())
import torch

free, total = torch.cuda.mem_get_info()
request = int(total * want) // (2 << 20) * (2 << 20)
fig.set("device_total", int(total))
fig.set("device_free_before_torch", int(free))
fig.set("request_bytes", request)
fig.probe(torch_stats)
t = torch.empty(request, dtype=torch.uint8, device="cuda")
print("allocated", t.numel(), flush=True)
