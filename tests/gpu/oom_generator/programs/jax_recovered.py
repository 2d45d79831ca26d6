"""A run that recovers: another process (CuPy) holds HOLD of the device, JAX's default
preallocation (75 %) is refused and backs off to what is left, the program computes a little
and exits 0.  argv: HOLD_FRACTION
"""
import os
import subprocess
import sys
from gen_common import Figures, jax_stats

fig = Figures()
hold = float(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
holder = subprocess.Popen([sys.executable, os.path.join(here, "holder.py"), str(hold)],
                          stdout=subprocess.PIPE, text=True)
line = holder.stdout.readline().strip()
fig.set("holder", line)
import jax
import jax.numpy as jnp

x = jnp.ones((2048, 2048), jnp.float32)
for _ in range(5):
    x = jnp.tanh(x @ x) * 0.5
x.block_until_ready()
fig.set("jax_stats", jax_stats())
holder.terminate()
holder.wait(timeout=30)
print("done", flush=True)
