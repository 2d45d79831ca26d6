"""Snapshot-shaped pickles with memo references reaching back any distance, written by
Python's own pickler (as `torch.cuda.memory._dump_snapshot()` writes them), for
`analysis/tests/torch_long_refs.rs`.

The allocator is simulated the way PyTorch's caching allocator serves 20 MiB requests:
each block fills its own 20 MiB segment; a freed block stays cached and is reused (lowest
address first) before a new segment is made. Objects are shared as PyTorch shares them:
one dict per distinct frame, one `'action'`-style key object, a new frame list per entry
(a repeat of a few stacks), a new `'N/A'` string per entry; with context "alloc" a free
shares its alloc's frame list, and `free_completed` shares its `free_requested`'s list;
with context "state" no trace entry has frames (PyTorch's `record_trace` drops them below
`RecordContext::ALLOC`) and only the dump's blocks carry their allocation's list.
What reaches far back: a block allocated first and freed last (its frame list), a frame
used only at the start and the end, `'segment_alloc'` once at the start (the loop reuses
segments made before the trace, as after a wrapped ring) and again at the end.

argv: OUT_STEM ITERATIONS CONTEXT(all|alloc|state) [SEED [PROTOCOL]] (protocol 2: BINPUT and
LONG_BINPUT instead of MEMOIZE, as PyTorch's C++ pickler writes). Writes OUT_STEM.pickle and
OUT_STEM.json (what the dump holds: allocated, reserved, segments, active blocks, and
entries per action).
"""
import json
import pickle
import random
import sys

MiB = 1 << 20
SIZE = 20 * MiB
BASE = 0x7F0000000000


def main():
    stem, iterations, context = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1)
    frames = [{"name": f"fn_{i}", "filename": f"/src/model_{i % 7}.py", "line": 10 + i} for i in range(40)]
    rare = {"name": "rare_setup", "filename": "/src/setup.py", "line": 3}
    stacks = [[frames[(k * 5 + j) % 40] for j in range(3 + k % 4)] for k in range(12)]
    segments = {}  # address -> block state ('active_allocated' or 'inactive'), frames
    free_cached = []
    trace = []
    t = [1_000_000]

    def entry(action, addr, size, frames_list):
        t[0] += rng.randint(1, 50)
        e = {
            "action": action, "addr": addr, "size": size, "stream": 0, "time_us": t[0],
            "compile_context": "".join(["N", "/A"]),  # a new object each time, as PyTorch makes
            "user_metadata": "",
        }
        if context != "state":
            e["frames"] = frames_list
        trace.append(e)

    def alloc(stack):
        if free_cached:
            free_cached.sort()
            addr = free_cached.pop(0)
        else:
            addr = BASE + len(segments) * SIZE
            entry("segment_alloc", addr, SIZE, list(stack))
        fl = list(stack)
        entry("alloc", addr, SIZE, fl)
        segments[addr] = ("active_allocated", fl)
        return addr, fl

    def free(addr, alloc_frames):
        fl = alloc_frames if context == "alloc" else list(rng.choice(stacks))
        entry("free_requested", addr, SIZE, fl)
        entry("free_completed", addr, SIZE, fl)
        segments[addr] = ("inactive", [])
        free_cached.append(addr)

    # Segments made before the trace began (a ring that wrapped): the loop reuses them, so
    # 'segment_alloc' appears once at the start and again only at the end.
    first = alloc([rare] + stacks[0])
    for i in range(1, 9):
        segments[BASE + i * SIZE] = ("inactive", [])
        free_cached.append(BASE + i * SIZE)
    live = []
    for i in range(iterations):
        for _ in range(rng.randint(1, 3)):
            live.append(alloc(rng.choice(stacks)))
        while len(live) > 3:
            free(*live.pop(rng.randrange(len(live))))
    free(*first)
    # The working set grows at the end: new segments, far from the first ones.
    for _ in range(len(free_cached) + 2):
        live.append(alloc([rare] + stacks[1]))
    segs = []
    for addr in sorted(segments):
        state, fl = segments[addr]
        active = SIZE if state == "active_allocated" else 0
        segs.append({
            "device": 0, "address": addr, "total_size": SIZE, "allocated_size": active,
            "active_size": active, "requested_size": active, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [],
            "blocks": [{"address": addr, "size": SIZE, "requested_size": active or SIZE,
                        "state": state, "frames": fl}],
        })
    snapshot = {
        "segments": segs,
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                               "expandable_segments": False},
        "external_annotations": [],
    }
    with open(stem + ".pickle", "wb") as f:
        pickle.dump(snapshot, f, protocol=int(sys.argv[5]) if len(sys.argv) > 5 else 4)
    actions = {}
    for e in trace:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
    active = sum(1 for s in segs if s["blocks"][0]["state"] == "active_allocated")
    by_site = {}
    for s in segs:
        b = s["blocks"][0]
        if b["state"] == "active_allocated":
            f = b["frames"][0]
            k = f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} in {f['name']}"
            by_site[k] = by_site.get(k, 0) + b["size"]
    figures = {
        "made_by": " ".join(["make_long.py"] + sys.argv[2:]),
        "at_dump": {"memory_allocated": active * SIZE, "memory_reserved": len(segs) * SIZE,
                    "segments": len(segs), "active_blocks": active, "bytes_by_site": by_site},
        "entries": len(trace), "actions": actions,
    }
    with open(stem + ".json", "w") as f:
        json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
