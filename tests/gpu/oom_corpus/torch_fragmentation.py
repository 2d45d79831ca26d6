"""PyTorch caching-allocator fragmentation: large segments are split into blocks, every other
block is freed, and a request larger than any cached hole needs a new segment that the
fraction limit refuses. Reserved-but-unallocated memory exceeds the request.
argv: SEGMENTS SEGMENT_MIB BLOCK_MIB REQUEST_MIB HEADROOM_MIB
"""
import sys
from corpus_common import MiB, Figures, torch_stats

fig = Figures()
nseg, seg, blk, req, headroom = (int(a) * (MiB if i else 1) for i, a in enumerate(sys.argv[1:6]))
import torch

total = torch.cuda.mem_get_info()[1]
frac = (nseg * seg + headroom) / total
torch.cuda.set_per_process_memory_fraction(frac, 0)
torch.cuda.memory._record_memory_history(max_entries=100000)
fig.set("fraction", frac)
fig.set("request_bytes", req)
fig.probe(torch_stats)


def dump():
    torch.cuda.memory._dump_snapshot("snapshot.pickle")
    return {}


fig.probe(dump)
# Reserve the segments whole, then let the allocator split them into blocks.
segs = [torch.empty(seg, dtype=torch.uint8, device="cuda") for _ in range(nseg)]
del segs
blocks = [torch.empty(blk, dtype=torch.uint8, device="cuda") for _ in range(nseg * (seg // blk))]
for i in range(0, len(blocks), 2):
    blocks[i] = None
fig.set("stats_before_request", torch_stats())
big = torch.empty(req, dtype=torch.uint8, device="cuda")
print("request fitted")
