"""The long JAX loop of issue 38: each step's output kept in a dict, so XLA's BFC pool
fills and every later execution fails (asynchronously, inside the output buffers).

    python3 long_jax.py N STEPS

N: the array is f32[N, N]; STEPS: loop length. Prints the step count now and then
(stdout) so a killed run still says how far it got.
"""
import sys
import time

import jax
import jax.numpy as jnp

n, steps = int(sys.argv[1]), int(sys.argv[2])


@jax.jit
def refine(x):
    return jnp.tanh(x @ x.T) * 0.5 + x * 0.5


t0 = time.time()
x = jnp.ones((n, n), jnp.float32)
history = {}
for step in range(steps):
    x = refine(x)
    history[step] = x
    if step % 10000 == 0:
        print(f"step {step} at {time.time() - t0:.1f} s", flush=True)
print(f"loop done: {steps} steps in {time.time() - t0:.1f} s", flush=True)
