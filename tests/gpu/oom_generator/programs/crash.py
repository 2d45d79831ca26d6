"""A crash that is not about memory: FRAMEWORK allocates MIB, then the program raises a
ValueError (exit 1).  argv: FRAMEWORK MIB
"""
import sys
from gen_common import Figures

fig = Figures()
fw, size = sys.argv[1], int(sys.argv[2]) << 20
if fw == "jax":
    import jax.numpy as jnp
    x = jnp.ones((size // 4,), jnp.float32).block_until_ready()
elif fw == "torch":
    import torch
    x = torch.ones(size, dtype=torch.uint8, device="cuda")
else:
    import cupy as cp
    x = cp.ones(size, dtype=cp.uint8)
raise ValueError(f"shapes (3, {size % 97 + 2}) and (4, 5) are not aligned: a bug in the data pipeline")
