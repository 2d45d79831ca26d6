"""CuPy arrays kept every step, no pool limit: the pool grows until the device is full.
argv: ARRAY_MIB
"""
import sys
from gen_common import Figures

fig = Figures()
size = int(sys.argv[1]) << 20
import cupy as cp

fig.set("bytes_per_step", size)
kept = []
fig.probe(lambda: {"steps_done": len(kept),
                   "pool_total_bytes": int(cp.get_default_memory_pool().total_bytes())})
while True:
    kept.append(cp.empty(size, dtype=cp.uint8))
