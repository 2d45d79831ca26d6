"""A PyTorch request larger than the device.  argv: RATIO"""
import sys
from corpus_common import Figures, torch_stats

fig = Figures()
ratio = float(sys.argv[1])
import torch

total = torch.cuda.mem_get_info()[1]
fig.set("request_bytes", int(total * ratio))
fig.probe(torch_stats)
x = torch.empty(int(total * ratio), dtype=torch.uint8, device="cuda")
print("allocated")
