"""One worker of launcher.py.  argv: LEAKS ROWS COLS"""
import sys
from gen_common import Figures, jax_env, jax_stats

fig = Figures()
leaks, rows, cols = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
fig.set("output_bytes_per_step", rows * cols * 4)
fig.probe(lambda: {"stats": jax_stats()})


@jax.jit
def step(x, s):
    return jnp.cos(x) * s + x * 0.5


x = jnp.ones((rows, cols), jnp.float32)
kept = []
for i in range(100000 if leaks else 5):
    x = step(x, 0.5)
    if leaks:
        kept.append(x)
    x.block_until_ready()
print("worker done", flush=True)
