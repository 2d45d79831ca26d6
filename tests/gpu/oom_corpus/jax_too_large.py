"""A request larger than the device: one array of RATIO times the device's total memory.
argv: RATIO
"""
import sys
from corpus_common import Figures, device_total_bytes, jax_env, jax_stats

fig = Figures()
ratio = float(sys.argv[1])
total = device_total_bytes()
n = int(total * ratio) // 4
fig.set("device_total_bytes", total)
fig.set("request_bytes", n * 4)
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})
fig.set("executable", "jit_broadcast_in_dim")
big = jnp.zeros((n,), jnp.float32)
jax.block_until_ready(big)
print("allocated")
