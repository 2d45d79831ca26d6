"""An SGD update without donation: params and grads stay live while the jitted update writes
new params of the same size, which do not fit the pool; with donate_argnums=0 it would reuse
the params' buffer.  argv: PARAM_MIB (the pool is set by XLA_CLIENT_MEM_FRACTION)
"""
import sys
from gen_common import Figures, jax_stats

fig = Figures()
size = int(sys.argv[1]) << 20
import jax
import jax.numpy as jnp

n = size // 4
fig.set("param_bytes", n * 4)
params = jnp.ones((n,), jnp.float32)
grads = jnp.full((n,), 0.01, jnp.float32)
jax.block_until_ready((params, grads))
fig.set("stats_before_update", jax_stats())


@jax.jit
def update(p, g):
    return p - 0.1 * g


fig.probe(lambda: {"stats_at_end": jax_stats()})
for step in range(3):
    params = update(params, grads)
    params.block_until_ready()
print("done", flush=True)
