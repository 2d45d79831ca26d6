"""Execute-time temp OOM: an MLP's value_and_grad whose live activations do not fit the pool.

Each GEMM fits (so compilation and autotuning succeed); together the activations kept for the
backward pass are larger than the BFC pool set by XLA_CLIENT_MEM_FRACTION, so execute fails
on the preallocated temp buffer.  argv: LAYERS BATCH WIDTH DTYPE
"""
import sys
from corpus_common import Figures, jax_analysis, jax_env, jax_stats

fig = Figures()
L, B, F, dt = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
D = 1024
dtype = jnp.dtype(dt)
key = jax.random.PRNGKey(1)
params = []
for _ in range(L):
    k1, k2, key = jax.random.split(key, 3)
    params.append((jax.random.normal(k1, (D, F), dtype) * 0.02, jax.random.normal(k2, (F, D), dtype) * 0.02))
x = jax.random.normal(key, (B, D), dtype)
jax.block_until_ready((params, x))


def forward_loss(params, x):
    h = x
    for w1, w2 in params:
        h = jnp.tanh(h @ w1) @ w2 + h
    return jnp.mean(h.astype(jnp.float32) ** 2)


step = jax.jit(jax.value_and_grad(forward_loss))
compiled = step.lower(params, x).compile()
fig.set("executable", "jit_forward_loss")
fig.set("memory_analysis", jax_analysis(compiled))
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})
v, g = step(params, x)
jax.block_until_ready((v, g))
print("no OOM: loss", float(v))
