"""PyTorch memory snapshots of the allocator paths the recorded fixtures do not cover, each
dumped with what PyTorch itself reports at that moment, for `memwatch report` / `import`.

argv: CASE OUT_DIR. Writes OUT_DIR/CASE.pickle and OUT_DIR/CASE.json (memory_allocated,
memory_reserved, their maxima, the OOM text if any). Cases:
  expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set by the driver script):
               growth and shrink (segment_map / segment_unmap), then an OOM under a fraction
  streams      blocks used on a side stream (record_stream): frees wait (free_completed later)
  ring         max_entries=2000 over a longer loop: the trace keeps only its last entries
  roundup      roundup_power2_divisions:4 and max_split_size_mb:64 (set by the driver)
  empty_cache  torch.cuda.empty_cache() mid-run: segment_free
"""
import json
import os
import sys

import torch

case, out = sys.argv[1], sys.argv[2]
MiB = 1 << 20


def stats():
    return {
        "memory_allocated": torch.cuda.memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "device_total": torch.cuda.get_device_properties(0).total_memory,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }


torch.cuda.memory._record_memory_history(max_entries=2000 if case == "ring" else 1_000_000)
exception = None
try:
    if case == "expandable":
        torch.cuda.set_per_process_memory_fraction(0.05)
        keep = [torch.empty(int(n * MiB), dtype=torch.uint8, device="cuda") for n in (3, 50, 700, 1.5)]
        del keep[1:3]
        torch.cuda.empty_cache()  # unmaps the freed tail pages
        keep += [torch.empty(300 * MiB, dtype=torch.uint8, device="cuda") for _ in range(30)]
    elif case == "streams":
        side = torch.cuda.Stream()
        for step in range(20):
            x = torch.randn(1024, 1024, device="cuda")
            with torch.cuda.stream(side):
                y = x @ x
            x.record_stream(side)
            y.record_stream(torch.cuda.current_stream())
            del x, y
        keep = torch.randn(4096, 1024, device="cuda")
    elif case == "ring":
        model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for step in range(200):
            model(torch.randn(64, 512, device="cuda")).square().mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    elif case == "roundup":
        keep = [torch.empty(int((1.1 + i / 7) * 1024) * MiB // 1024, dtype=torch.uint8, device="cuda") for i in range(12)]
        del keep[::3]
        keep += [torch.empty(int((70 + 13 * i) * MiB), dtype=torch.uint8, device="cuda") for i in range(8)]
    elif case == "empty_cache":
        keep = [torch.empty(64 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
        del keep[2:6]
        torch.cuda.empty_cache()
        keep.append(torch.empty(100 * MiB, dtype=torch.uint8, device="cuda"))
    else:
        raise SystemExit(f"unknown case {case}")
except torch.OutOfMemoryError as e:
    exception = str(e)
torch.cuda.synchronize()
figures = {"case": case, "at_dump": stats(), "exception": exception}
torch.cuda.memory._dump_snapshot(os.path.join(out, case + ".pickle"))
with open(os.path.join(out, case + ".json"), "w") as f:
    json.dump(figures, f, indent=1)
print(case, "done", "OOM" if exception else "")
