"""Compile-time OOM in GEMM autotuning: the pool holds the two f32 [N,N] arguments and too
little is left for the autotuner's scratch (the output buffer plus redzones), so every config
fails during profiling.  argv: N MARGIN_MIB (pool = arguments + margin, set from the device's
total memory before JAX starts)
"""
import os
import sys
from corpus_common import Figures, MiB, device_total_bytes, jax_analysis, jax_env, jax_stats

fig = Figures()
N, margin = int(sys.argv[1]), int(sys.argv[2]) * MiB
total = device_total_bytes()
arg_bytes = 2 * N * N * 4
frac = (arg_bytes + margin) / total
os.environ["XLA_CLIENT_MEM_FRACTION"] = f"{frac:.5f}"
fig.set("device_total_bytes", total)
fig.set("argument_bytes", arg_bytes)
fig.set("requested_pool_bytes", arg_bytes + margin)
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
ka, kb = jax.random.split(jax.random.PRNGKey(0))
a = jax.random.normal(ka, (N, N), jnp.float32)
b = jax.random.normal(kb, (N, N), jnp.float32)
jax.block_until_ready((a, b))
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})


def step(a, b):
    return jnp.tanh(a @ b)


fig.set("executable", "jit_step")
compiled = jax.jit(step).lower(a, b).compile()
fig.set("memory_analysis", jax_analysis(compiled))
c = compiled(a, b)
jax.block_until_ready(c)
print("compiled and ran: no OOM")
