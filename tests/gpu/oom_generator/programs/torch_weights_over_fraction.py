"""A model whose weights do not fit PyTorch's per-process memory fraction: tensors of the
given sizes (all different, a load rather than a loop) are put on the device one after another
under torch.cuda.set_per_process_memory_fraction(FRACTION), and the cap refuses one before the
last while the device has room.  argv: FRACTION SIZE_MIB[,SIZE_MIB...]
"""
import sys
from gen_common import MiB, Figures, torch_stats

fig = Figures()
frac = float(sys.argv[1])
sizes = [int(s) * MiB for s in sys.argv[2].split(",")]
import torch

torch.cuda.set_per_process_memory_fraction(frac, 0)
fig.set("fraction", frac)
fig.set("weights_bytes", sum(sizes))
fig.probe(torch_stats)
weights = []
for s in sizes:
    weights.append(torch.empty(s, dtype=torch.uint8, device="cuda"))
print("loaded", flush=True)
