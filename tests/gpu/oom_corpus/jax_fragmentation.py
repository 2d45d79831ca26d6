"""BFC fragmentation: fill the pool with equal arrays, delete every other one, then transfer
an array larger than any hole: the free total exceeds the request, no free block is large
enough, and the host-to-device transfer fails.  argv: COUNT BLOCK_MIB REQUEST_MIB
"""
import sys
import numpy as np
from corpus_common import MiB, Figures, jax_env, jax_stats

fig = Figures()
count, block, request = int(sys.argv[1]), int(sys.argv[2]) * MiB, int(sys.argv[3]) * MiB
import jax

fig.set("env", jax_env())
fig.set("block_bytes", block)
fig.set("request_bytes", request)
dev = jax.devices()[0]
blocks = [jax.device_put(np.full(block // 4, i, np.float32), dev) for i in range(count)]
jax.block_until_ready(blocks)
for i in range(0, count, 2):
    blocks[i].delete()
fig.set("memory_stats_before", jax_stats())
fig.probe(lambda: {"memory_stats_after": jax_stats()})
big = jax.device_put(np.zeros(request // 4, np.float32), dev)
jax.block_until_ready(big)
print("transfer fitted")
