"""Execute-time temp OOM in a differentiated lax.scan: the residuals of every step are kept
for the backward pass, so temp grows with the number of steps.  argv: STEPS WIDTH BATCH
"""
import sys
from corpus_common import Figures, jax_analysis, jax_env, jax_stats

fig = Figures()
T, W, B = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
key = jax.random.PRNGKey(7)
w = jax.random.normal(key, (W, W), jnp.float32) / W
h0 = jnp.ones((B, W), jnp.float32)
jax.block_until_ready((w, h0))


def rollout(w, h0):
    def cell(h, _):
        h = jnp.sin(h @ w) + h
        return h, None
    h, _ = jax.lax.scan(cell, h0, None, length=T)
    return jnp.sum(h * h)


grad = jax.jit(jax.grad(rollout))
compiled = grad.lower(w, h0).compile()
fig.set("executable", "jit_rollout")
fig.set("memory_analysis", jax_analysis(compiled))
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})
gw = grad(w, h0)
jax.block_until_ready(gw)
print("no OOM", float(gw[0, 0]))
