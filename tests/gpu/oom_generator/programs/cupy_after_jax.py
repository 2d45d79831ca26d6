"""JAX and CuPy in one process: JAX preallocates its pool, then CuPy asks for more than is
left.  argv: CUPY_FRACTION_OF_DEVICE
"""
import sys
from gen_common import Figures, jax_stats

fig = Figures()
want = float(sys.argv[1])
import jax
import jax.numpy as jnp

jnp.ones((1024, 1024), jnp.float32).block_until_ready()
fig.set("jax_stats", jax_stats())
import cupy as cp

free, total = cp.cuda.runtime.memGetInfo()
request = int(total * want) // (2 << 20) * (2 << 20)
fig.set("device_total", int(total))
fig.set("device_free_before_cupy", int(free))
fig.set("request_bytes", request)
a = cp.empty(request, dtype=cp.uint8)
print("allocated", a.nbytes, flush=True)
