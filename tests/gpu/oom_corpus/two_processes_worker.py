"""The JAX worker of two_processes.py: keeps STEP_MIB arrays until the device is full."""
import sys
from corpus_common import MiB, Figures, jax_env, jax_stats

fig = Figures()
step = int(sys.argv[1]) * MiB
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
fig.set("step_bytes", step)
kept = []
fig.probe(lambda: {"memory_stats_after": jax_stats(), "arrays_kept": len(kept)})
fig.set("executable", "jit_broadcast_in_dim")
for i in range(1000):
    kept.append(jnp.full((step // 4,), i, jnp.float32))
    jax.block_until_ready(kept[-1])
    print(f"kept {len(kept)} arrays", flush=True)
