"""Pinned host memory that cannot be had: CuPy asks for TIB TiB of page-locked host memory.
argv: TIB
"""
import sys
from corpus_common import Figures

fig = Figures()
tib = float(sys.argv[1])
import cupy as cp

req = int(tib * (1 << 40))
fig.set("request_bytes", req)
with open("/proc/meminfo") as f:
    fig.set("host_memtotal_kib", int(f.readline().split()[1]))
dev = cp.zeros(1024, cp.float32)  # a context and a small device allocation first
mem = cp.cuda.alloc_pinned_memory(req)
print("pinned")
