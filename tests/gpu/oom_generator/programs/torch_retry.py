"""A caught out-of-memory error retried smaller: the program asks PyTorch for RATIO times the
device, catches torch.OutOfMemoryError, then works with a quarter of the device and exits 0.
argv: RATIO
"""
import sys
from gen_common import Figures, torch_stats

fig = Figures()
ratio = float(sys.argv[1])
import torch

total = torch.cuda.mem_get_info()[1]
fig.set("first_request", int(total * ratio))
try:
    big = torch.empty(int(total * ratio), dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as e:
    fig.set("caught", str(e)[:200])
    torch.cuda.empty_cache()
    small = torch.empty(total // 4, dtype=torch.uint8, device="cuda")
    small.fill_(1)
    torch.cuda.synchronize()
fig.probe(torch_stats)
print("recovered", flush=True)
