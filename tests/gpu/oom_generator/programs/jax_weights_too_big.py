"""A model whose weights do not fit the pool: COUNT arrays of MIB each are put on the device
once (a load, not a loop), and the pool set by XLA_CLIENT_MEM_FRACTION runs out before the
last.  argv: COUNT MIB
"""
import sys
from gen_common import Figures, jax_stats
import numpy as np

fig = Figures()
count, size = int(sys.argv[1]), int(sys.argv[2]) << 20
import jax

fig.set("weights_bytes", count * size)
fig.probe(lambda: {"stats": jax_stats()})
host = np.ones((size // 4,), np.float32)
weights = []
for i in range(count):
    weights.append(jax.device_put(host))
    weights[-1].block_until_ready()
print("loaded", flush=True)
