"""A PyTorch loop that keeps something every iteration and never frees it, with no
per-process fraction: the caching allocator asks the driver for new segments until the device
is full. MODE `tensors`: PERIOD tensors of the given MiB sizes are appended to a list each
iteration; MODE `graph`: an evaluation loop keeps each output with its autograd graph (the
activations of a WIDTH-wide MLP on a BATCH batch).
argv: tensors SIZE_MIB[,SIZE_MIB...]   |   graph BATCH WIDTH
"""
import sys
from gen_common import Figures, torch_stats

fig = Figures()
mode = sys.argv[1]
import torch

fig.probe(torch_stats)
kept = []
allocated = []
fig.probe(lambda: {"steps_done": len(allocated), "allocated_per_step": allocated[-64:],
                   "first_allocated": allocated[:4]})
if mode == "tensors":
    sizes = [int(s) << 20 for s in sys.argv[2].split(",")]
    fig.set("bytes_per_step", sum(sizes))
    while True:
        for s in sizes:
            kept.append(torch.empty(s, dtype=torch.uint8, device="cuda"))
        allocated.append(int(torch.cuda.memory_allocated()))
else:
    batch, width = int(sys.argv[2]), int(sys.argv[3])
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(),
                                torch.nn.Linear(width, width)).cuda()
    x = torch.randn(batch, width, device="cuda")
    while True:
        out = model(x)          # requires grad: the graph and its activations stay alive
        kept.append(out)
        allocated.append(int(torch.cuda.memory_allocated()))
