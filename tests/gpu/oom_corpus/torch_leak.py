"""A PyTorch training loop that keeps every step's loss with its graph (a classic leak): the
activations of every step stay alive until the fraction limit stops a step.
argv: FRACTION BATCH WIDTH
"""
import sys
from corpus_common import Figures, torch_stats

fig = Figures()
frac, batch, width = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
import torch

torch.cuda.set_per_process_memory_fraction(frac, 0)
torch.cuda.memory._record_memory_history(max_entries=50000)
fig.set("fraction", frac)
fig.probe(torch_stats)
fig.probe(lambda: (torch.cuda.memory._dump_snapshot("snapshot.pickle"), {})[1])
model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
losses = []
steps = []
fig.probe(lambda: {"steps_done": len(steps), "allocated_per_step": steps})
for step in range(100000):
    x = torch.randn(batch, width, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
    losses.append(loss)  # the leak: the graph (and its activations) of every step stays alive
    steps.append(int(torch.cuda.memory_allocated()))
    print(f"step {step}: allocated {steps[-1]}", flush=True)
