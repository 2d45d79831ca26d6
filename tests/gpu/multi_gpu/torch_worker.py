"""One PyTorch worker of a torchrun job, on its own GPU (NCCL).

  train STEPS WIDTH BATCH       DistributedDataParallel MLP training, NCCL all-reduce of the
                                gradients; NCCL's communicator init and the first all-reduce
                                are timestamped in events.rank<R>.jsonl.
  uneven LAYERS WIDTH BATCH FRACTION
                                a model split unevenly over the ranks (LAYERS like 6,2), each rank
                                limited to FRACTION of its GPU (set_per_process_memory_fraction):
                                the heavy rank raises torch.OutOfMemoryError, the others fit.
"""
import os
import sys

from mg_common import CPU_TEST, LOCAL_RANK, RANK, WORLD, figures, mark

fig = figures()
mode = sys.argv[1]
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dev = torch.device("cpu") if CPU_TEST else torch.device("cuda", LOCAL_RANK)
if not CPU_TEST:
    torch.cuda.set_device(dev)


def stats():
    if CPU_TEST:
        return {}
    free, total = torch.cuda.mem_get_info(dev)
    return {"memory_allocated": int(torch.cuda.memory_allocated(dev)),
            "memory_reserved": int(torch.cuda.memory_reserved(dev)),
            "max_memory_allocated": int(torch.cuda.max_memory_allocated(dev)),
            "max_memory_reserved": int(torch.cuda.max_memory_reserved(dev)),
            "device_free": int(free), "device_total": int(total)}


fig.set("device", {"index": LOCAL_RANK, "name": "cpu" if CPU_TEST else torch.cuda.get_device_name(dev)})
fig.set("torch_version", torch.__version__)
fig.probe(lambda: {"memory_end": stats()})
mark("init_process_group_start")
dist.init_process_group("gloo" if CPU_TEST else "nccl", device_id=None if CPU_TEST else dev)
mark("init_process_group_end")

if mode == "train":
    steps, width, batch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                torch.nn.Linear(4 * width, width)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=None if CPU_TEST else [LOCAL_RANK])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(RANK)
    x = torch.randn(batch, width, generator=g).to(dev)
    mark("first_all_reduce_start")
    t = torch.ones(1 << 20, device=dev)
    dist.all_reduce(t)
    if not CPU_TEST:
        torch.cuda.synchronize(dev)
    mark("first_all_reduce_end", value=float(t[0]))
    fig.set("all_reduce_value", float(t[0]))
    fig.set("memory_after_nccl_init", stats())
    for s in range(steps):
        mark("step_start", step=s)
        opt.zero_grad(set_to_none=True)
        loss = ((ddp(x) - x) ** 2).mean()
        loss.backward()
        opt.step()
        if not CPU_TEST:
            torch.cuda.synchronize(dev)
        mark("step_end", step=s)
    fig.set("loss", float(loss))
    fig.set("memory_after_steps", stats())
    print(f"rank {RANK}: loss {float(loss):.5f} {stats()}", flush=True)
elif mode == "uneven":
    layers = [int(v) for v in sys.argv[2].split(",")]
    width, batch, fraction = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    if not CPU_TEST:
        torch.cuda.set_per_process_memory_fraction(fraction, dev)
    mine = layers[RANK % len(layers)]
    fig.set("layers", layers)
    fig.set("my_layers", mine)
    fig.set("fraction", fraction)
    fig.set("param_share", mine / sum(layers[:WORLD]))
    blocks = []
    for _ in range(mine):
        blocks += [torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)]
    model = torch.nn.Sequential(*blocks).to(dev)
    fig.set("param_bytes", sum(p.numel() * p.element_size() for p in model.parameters()))
    x = torch.randn(batch, width, device=dev)
    fig.set("memory_before", stats())
    mark("step_start", step=0)
    loss = (model(x) ** 2).mean()
    loss.backward()
    if not CPU_TEST:
        torch.cuda.synchronize(dev)
    mark("step_end", step=0)
    print(f"rank {RANK}: {mine} layers fit {stats()}", flush=True)
else:
    sys.exit(f"unknown mode {mode}")
dist.destroy_process_group()
