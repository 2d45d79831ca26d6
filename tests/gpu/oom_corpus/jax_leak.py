"""A leak across steps: the loop keeps every step's output alive (a history list), so the
same executable's outputs accumulate until the pool is full — or, with an allocator that
ignores the fraction (cuda_async, platform), far past the reported limit.
argv: STEPS ROWS COLS [LEAK_FROM_STEP]  (each step's output is f32 [ROWS, COLS]; steps before
LEAK_FROM_STEP drop their output, as a healthy loop does)
"""
import sys
import time
from corpus_common import Figures, jax_analysis, jax_env, jax_stats

fig = Figures()
steps, rows, cols = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
leak_from = int(sys.argv[4]) if len(sys.argv) > 4 else 0
import jax
import jax.numpy as jnp

fig.set("env", jax_env())
fig.set("output_bytes_per_step", rows * cols * 4)
fig.set("leak_from_step", leak_from)
state = jnp.ones((rows, cols), jnp.float32)


@jax.jit
def update(state, scale):
    new = jnp.sin(state) * scale + state * 0.5
    return new, new * 2.0


compiled = update.lower(state, 1.0).compile()
fig.set("executable", "jit_update")
fig.set("memory_analysis", jax_analysis(compiled))
fig.set("memory_stats_before", jax_stats())
history = []
samples = []
fig.probe(lambda: {"memory_stats_after": jax_stats(), "steps_done": len(samples),
                   "stats_per_step": samples})
for i in range(steps):
    state, out = update(state, 1.0 + i * 1e-3)
    if i >= leak_from:
        history.append(out)  # the leak: every step's output stays reachable
    jax.block_until_ready(out)
    s = jax_stats()
    samples.append({"step": i, "bytes_in_use": s.get("bytes_in_use"), "pool_bytes": s.get("pool_bytes"),
                    "bytes_limit": s.get("bytes_limit")})
    print(f"step {i}: {len(history)} outputs kept, bytes_in_use={s.get('bytes_in_use')}", flush=True)
time.sleep(0.3)
print("finished without OOM")
