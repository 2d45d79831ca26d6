"""Writes the snapshot pickles of testdata/torch-snapshots/formats/: one small program's
memory history in each layout PyTorch's snapshot code has written, CONSTRUCTED FROM THAT
CODE, NOT RECORDED (no GPU with those PyTorch versions was available). Each layout
follows, key by key and in the code's insertion order, the C++ that builds the snapshot
(named in LAYOUTS below); `torch.cuda.memory._dump_snapshot` pickles what
`torch._C._cuda_memorySnapshot()` returns with Python's `pickle.dump` (protocol 4), and
the C++ API `torch::cuda::_memory_snapshot_pickled()` writes with TorchScript's pickler
(protocol 2).

The program, on device 0 (what memwatch must read back from every layout):
  a 20 MiB large-pool segment; 8 MiB allocated at train.py:42 (held to the end);
  4 MiB at train.py:57, freed; a 2 MiB small-pool segment with 512 B at train.py:42;
  a refused 64 MiB request (OOM) with 1 GiB free on the device.
At the dump: allocated 8 MiB + 512 B = 8,389,120 B; reserved 22 MiB = 23,068,672 B.

Run: python3 make_formats.py   (Python 3.8+, no third-party module)
"""

import pickle
import sys

MiB = 1 << 20
SEG = 0x7F00_0000_0000
SMALL = 0x7F00_4000_0000
T0 = 1_732_600_000_000_000  # Unix µs

CPP = [
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "??", 0),
    ("at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)", "??", 0),
]
PY_A = [
    ("forward", "/venv/lib/python3.10/site-packages/torch/nn/modules/linear.py", 114),
    ("step", "/src/train.py", 42),
    ("<module>", "/src/train.py", 80),
]
PY_B = [
    ("step", "/src/train.py", 57),
    ("<module>", "/src/train.py", 80),
]


class Out:
    """One layout's strings made once and reused, as the C++ makes each key once
    (`py::str action_s = "action"`), so the pickler memoizes them as PyTorch's does."""

    def __init__(self):
        self.s = {}

    def __call__(self, text):
        return self.s.setdefault(text, str(text))


def frame(k, name, filename, line, order):
    d = {}
    for key in order:
        d[k(key)] = {"name": name, "filename": filename, "line": line}[key]
    return d


def combined(k, py, order, cache):
    """A stack as the symbolizer gives it (C++ frames then Python, innermost first);
    one list object per distinct stack, shared, as PyTorch's symbolize does."""
    key = tuple(py)
    if key not in cache:
        cache[key] = [frame(k, *f, order) for f in CPP] + [frame(k, *f, order) for f in py]
    return cache[key]


def program():
    """(action, addr, size, stack, time offset µs) on device 0, in order."""
    return [
        ("segment_alloc", SEG, 20 * MiB, PY_A, 0),
        ("alloc", SEG, 8 * MiB, PY_A, 10),
        ("alloc", SEG + 8 * MiB, 4 * MiB, PY_B, 20),
        ("free_requested", SEG + 8 * MiB, 4 * MiB, PY_B, 30),
        ("free_completed", SEG + 8 * MiB, 4 * MiB, PY_B, 31),
        ("segment_alloc", SMALL, 2 * MiB, PY_A, 40),
        ("alloc", SMALL, 512, PY_A, 41),
        ("oom", 1 << 30, 64 * MiB, PY_B, 50),
    ]


def dump_segments():
    """(address, total, type, [(address, size, requested, state, stack or None)])."""
    return [
        (SEG, 20 * MiB, "large", [
            (SEG, 8 * MiB, 8 * MiB, "active_allocated", PY_A),
            (SEG + 8 * MiB, 12 * MiB, 12 * MiB, "inactive", None),
        ]),
        (SMALL, 2 * MiB, "small", [
            (SMALL, 512, 512, "active_allocated", PY_A),
            (SMALL + 512, 2 * MiB - 512, 0, "inactive", None),
        ]),
    ]


def v2_0():
    """torch/csrc/cuda/Module.cpp THCPModule_memorySnapshot of the 2.0 API (it binds
    `_cuda_recordMemoryHistory(bool enabled, bool record_context, bool
    record_context_cpp, Py_ssize_t alloc_trace_max_entries, bool
    alloc_trace_record_context)`): blocks carry `history` ([{addr, real_size, frames,
    cpp_frames}]) instead of `address`/`requested_size`/`frames`; Python frames
    {filename, name, line} and C++ frames as a separate list of strings; segments
    without requested_size, is_expandable, segment_pool_id, frames; trace entries
    {frames, cpp_frames, action, addr|device_free, size, stream}, no time."""
    k = Out()
    order = ("filename", "name", "line")
    stacks = {}

    def py(st):
        key = tuple(st)
        if key not in stacks:
            stacks[key] = [frame(k, *f, order) for f in st]
        return stacks[key]

    cpp = [n for n, _, _ in CPP]
    segments = []
    for addr, total, kind, blocks in dump_segments():
        seg = {}
        seg[k("device")] = 0
        seg[k("address")] = addr
        seg[k("total_size")] = total
        seg[k("allocated_size")] = sum(b[1] for b in blocks if b[3] == "active_allocated")
        seg[k("active_size")] = sum(b[1] for b in blocks if b[3] != "inactive")
        seg[k("stream")] = 0
        seg[k("segment_type")] = k(kind)
        out = []
        for b_addr, size, req, state, st in blocks:
            b = {}
            b[k("size")] = size
            b[k("state")] = k(state)
            if st is not None:
                h = {}
                h[k("addr")] = b_addr
                h[k("real_size")] = req
                h[k("frames")] = py(st)
                h[k("cpp_frames")] = cpp
                b[k("history")] = [h]
            out.append(b)
        seg[k("blocks")] = out
        segments.append(seg)
    trace = []
    for action, addr, size, st, _ in program():
        e = {}
        e[k("frames")] = py(st)
        e[k("cpp_frames")] = cpp
        e[k("action")] = k(action)
        e[k("device_free" if action == "oom" else "addr")] = addr
        e[k("size")] = size
        e[k("stream")] = 0
        trace.append(e)
    return {"segments": segments, "device_traces": [trace]}


def modern(time=False, settings=False, annotations=False, compile_context=False, user_metadata=False,
           order=("name", "filename", "line")):
    """The layout every later THCPModule_memorySnapshot builds (blocks with address,
    requested_size, state, frames; segments with requested_size, segment_pool_id,
    is_expandable, frames; frames from the combined symbolizer, added after the rest of
    their dict unless empty), with the additions each later version made."""
    k = Out()
    stacks = {}
    empty = []
    segments = []
    for addr, total, kind, blocks in dump_segments():
        seg = {}
        seg[k("device")] = 0
        seg[k("address")] = addr
        seg[k("total_size")] = total
        seg[k("allocated_size")] = sum(b[1] for b in blocks if b[3] == "active_allocated")
        seg[k("active_size")] = sum(b[1] for b in blocks if b[3] != "inactive")
        seg[k("requested_size")] = sum(b[2] for b in blocks if b[3] != "inactive")
        seg[k("stream")] = 0
        seg[k("segment_type")] = k(kind)
        seg[k("segment_pool_id")] = (0, 0)
        seg[k("is_expandable")] = False
        out = []
        for b_addr, size, req, state, st in blocks:
            b = {}
            b[k("address")] = b_addr
            b[k("size")] = size
            b[k("requested_size")] = req
            b[k("state")] = k(state)
            b[k("frames")] = combined(k, st, order, stacks) if st else empty
            out.append(b)
        seg[k("blocks")] = out
        seg[k("frames")] = combined(k, PY_A, order, stacks)
        segments.append(seg)
    trace = []
    for action, addr, size, st, dt in program():
        e = {}
        e[k("action")] = k(action)
        e[k("device_free" if action == "oom" else "addr")] = addr
        e[k("size")] = size
        e[k("stream")] = 0
        if time:
            e[k("time_us")] = T0 + dt
        if compile_context:
            e[k("compile_context")] = k("N/A")
        if user_metadata:
            e[k("user_metadata")] = k("")
        e[k("frames")] = combined(k, st, order, stacks)
        trace.append(e)
    result = {"segments": segments, "device_traces": [trace]}
    if settings:
        a = {}
        a[k("PYTORCH_CUDA_ALLOC_CONF")] = k("")
        a[k("max_split_size")] = -1
        a[k("garbage_collection_threshold")] = 0.0
        a[k("expandable_segments")] = False
        a[k("pinned_num_register_threads")] = 1
        a[k("release_lock_on_cudamalloc")] = False
        a[k("pinned_use_cuda_host_register")] = False
        a[k("roundup_power2_divisions")] = {str(1 << i): 0 for i in range(16)}
        result["allocator_settings"] = a
    if annotations:
        notes = []
        for stage, dt in (("START", 5), ("END", 45)):
            n = {}
            n[k("stage")] = k(stage)
            n[k("name")] = k("## step ##")
            n[k("device")] = 0
            n[k("time_us")] = T0 + dt
            notes.append(n)
        result["external_annotations"] = notes
    return result


# Which release first wrote each layout is inferred from the date of the pull request
# that added the key (the repository's tags could not be read here): time_us #112266
# (2023-10) -> 2.2; allocator_settings #119404 (2024-02) -> 2.3; external_annotations
# #130964 (2024-07) -> 2.5; compile_context #152707 (2025-05) -> 2.8; user_metadata
# #165490 (2025-10) -> 2.10.
LAYOUTS = {
    # name: (document, pickle protocol)
    "v2_0_history": (v2_0(), 4),
    "v2_1_frames": (modern(), 4),
    "v2_2_time_us": (modern(time=True), 4),
    "v2_3_settings": (modern(time=True, settings=True), 4),
    "v2_5_annotations": (modern(time=True, settings=True, annotations=True), 4),
    "v2_8_compile_context": (modern(time=True, settings=True, annotations=True, compile_context=True), 4),
    "v2_10_user_metadata": (modern(time=True, settings=True, annotations=True, compile_context=True,
                                   user_metadata=True), 4),
    "cpp_api_protocol2": (modern(time=True, settings=True), 2),
}

if __name__ == "__main__":
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    for name, (doc, proto) in LAYOUTS.items():
        with open(os.path.join(here, name + ".pickle"), "wb") as f:
            pickle.dump(doc, f, protocol=proto)
        print(name, proto, file=sys.stderr)
