"""Co-resident executables: one executable's large output (a cache) stays live while another
executable, which would fit alone, needs a temp buffer that no longer fits.
argv: CACHE_MIB ROWS REPEAT
"""
import sys
from corpus_common import MiB, Figures, jax_analysis, jax_env, jax_stats

fig = Figures()
cache_bytes, rows, repeat = int(sys.argv[1]) * MiB, int(sys.argv[2]), int(sys.argv[3])
import jax
import jax.numpy as jnp

fig.set("env", jax_env())


@jax.jit
def build_cache(seed):
    return jnp.full((cache_bytes // 4,), seed, jnp.float32)


@jax.jit
def rank_rows(x):
    tiled = jnp.tile(x, (repeat, 1)) * jnp.arange(repeat * x.shape[0], dtype=x.dtype)[:, None]
    return jnp.sort(tiled, axis=0)[:4]


x = jnp.ones((rows, 2048), jnp.float32)
c_cache = build_cache.lower(1.0).compile()
c_rank = rank_rows.lower(x).compile()
fig.set("executables", {"jit_build_cache": jax_analysis(c_cache), "jit_rank_rows": jax_analysis(c_rank)})
fig.set("executable", "jit_rank_rows")
fig.set("resident_executable", "jit_build_cache")
cache = build_cache(1.0)
jax.block_until_ready(cache)
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})
r = rank_rows(x)
jax.block_until_ready(r)
print("fitted")
