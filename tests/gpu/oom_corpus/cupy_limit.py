"""CuPy with a memory-pool limit: arrays are kept step after step until the pool refuses one.
argv: LIMIT_MIB ARRAY_MIB
"""
import sys
from corpus_common import MiB, Figures

fig = Figures()
limit, size = int(sys.argv[1]) * MiB, int(sys.argv[2]) * MiB
import cupy as cp

pool = cp.get_default_memory_pool()
pool.set_limit(size=limit)
fig.set("limit_bytes", limit)
fig.set("request_bytes", size)
fig.probe(lambda: {"pool_used_bytes": int(pool.used_bytes()), "pool_total_bytes": int(pool.total_bytes()),
                   "pool_limit": int(pool.get_limit()), "cupy_version": cp.__version__})
kept = []
for i in range(100000):
    kept.append(cp.full(size // 4, i, dtype=cp.float32))
    print(f"kept {len(kept)} arrays", flush=True)
