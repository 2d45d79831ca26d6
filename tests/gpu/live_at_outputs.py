"""A JAX program whose jitted step returns three outputs of different sizes and dtypes and
keeps every step's outputs alive: the capture of a real run says which output of the
executable each buffer is, and the "live at" view names each output's op_name."""
import json
import sys
import time

import jax
import jax.numpy as jnp

n, m, steps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


@jax.jit
def step(x, w):
    y = jnp.tanh(x @ w)
    s = jnp.sum(y, axis=1)
    z = (y * 2.0).astype(jnp.bfloat16)
    return y, s, z


x = jnp.ones((n, n), jnp.float32)
w = jnp.full((n, m), 0.01, jnp.float32)
keep = []
for _ in range(steps):
    keep.append(step(x, w))
    jax.block_until_ready(keep[-1])
time.sleep(0.4)
print(json.dumps({"steps": steps, "sizes": [a.nbytes for a in keep[-1]]}), flush=True)
