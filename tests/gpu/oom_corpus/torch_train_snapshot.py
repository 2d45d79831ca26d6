"""A healthy small PyTorch training loop with memory history on; dumps a snapshot at the end
(testdata for the snapshot importer), with allocated/reserved as PyTorch reports them.
argv: STEPS WIDTH
"""
import sys
from corpus_common import Figures, torch_stats

fig = Figures()
steps, width = int(sys.argv[1]), int(sys.argv[2])
import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.ReLU(),
                            torch.nn.Linear(4 * width, width)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(steps):
    x = torch.randn(64, width, device="cuda")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
fig.set("at_dump", torch_stats())
torch.cuda.memory._dump_snapshot("snapshot.pickle")
print("done", float(loss))
