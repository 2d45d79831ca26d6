"""PyTorch under a per-process memory fraction: tensors are kept until the caching allocator's
limit (set_per_process_memory_fraction) stops the next one, while the device has room.
argv: FRACTION TENSOR_MIB
"""
import sys
from corpus_common import MiB, Figures, torch_stats

fig = Figures()
frac, size = float(sys.argv[1]), int(sys.argv[2]) * MiB
import torch

torch.cuda.set_per_process_memory_fraction(frac, 0)
fig.set("fraction", frac)
fig.set("request_bytes", size)
fig.probe(torch_stats)
kept = []
for i in range(10000):
    kept.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
    print(f"kept {len(kept)} tensors", flush=True)
