"""Long PyTorch memory snapshots for `tests/gpu/torch_snapshots_long.sh`: recorded with
`torch.cuda.memory._record_memory_history()` around a loop of a few allocations per
iteration (tensors kept for a few iterations, a few kept for thousands, now and then a
large one and `empty_cache()`), dumped with PyTorch's figures at that moment.

  record CASE OUT_DIR ITERATIONS [ITERATIONS|BYTESb ...]
      Records with CASE's settings (see CASES) and dumps OUT_DIR/CASE.pickle after the
      first count of iterations; later counts (cumulative) dump CASE_2.pickle, ...; a
      count written as BYTESb (e.g. 1100000000b) is the iterations that make a file of
      about that size, at the bytes per iteration of the dump before.
      Writes NAME.json beside each: per device memory_allocated, memory_reserved,
      segments and active blocks (memory_stats), and the record/dump seconds.
  check NAME.pickle NAME.json REPORT.json [--python]
      Compares memwatch's report with PyTorch's figures and, with --python, with
      Python's own reading of the file (segments, active blocks, allocated and reserved
      bytes, allocated bytes by Python line). Prints "NAME: OK ..." or "NAME: FAIL ...".
  measure OUT.json -- CMD ...
      Runs CMD, writing its wall seconds and peak RSS (ru_maxrss of the child).
"""
import json
import os
import pickle
import resource
import subprocess
import sys
import time

MiB = 1 << 20

# name: (stacks, context, enabled, max_entries, user_pickled, devices)
CASES = {
    "all_all": ("all", "all", "all", None, False, 1),
    "python_all": ("python", "all", "all", None, False, 1),
    "python_alloc": ("python", "alloc", "all", None, False, 1),
    "all_state": ("all", "state", "all", None, False, 1),
    "python_ring": ("python", "all", "all", 5000, False, 1),
    "state_only": ("python", "state", "state", None, False, 1),
    "expandable": ("python", "all", "all", None, False, 1),  # the driver sets the conf
    "user_pickled": ("python", "alloc", "all", None, True, 1),
    "two_devices": ("python", "all", "all", None, False, 2),
    "medium": ("all", "all", "all", None, False, 1),
    "large": ("python", "all", "all", None, False, 1),
}

SIZES = [1024, 300 * 1024, 3 * MiB, 25 * MiB]


def figures(devices):
    import torch

    out = []
    for d in range(devices):
        s = torch.cuda.memory_stats(d)
        out.append({
            "device": d,
            "memory_allocated": torch.cuda.memory_allocated(d),
            "memory_reserved": torch.cuda.memory_reserved(d),
            "segments": s.get("segment.all.current", 0),
            "active_blocks": s.get("active.all.current", 0),
            "allocated_blocks": s.get("allocation.all.current", 0),
        })
    return out


def record(case, out, counts):
    import torch

    stacks, context, enabled, max_entries, user_pickled, devices = CASES[case]
    if devices > torch.cuda.device_count():
        print(f"{case}: SKIP: {torch.cuda.device_count()} device(s), the case needs {devices}")
        return
    kw = {"enabled": enabled, "context": context, "stacks": stacks}
    if max_entries:
        kw["max_entries"] = max_entries
    devs = [torch.device("cuda", d) for d in range(devices)]
    for d in devs:
        with torch.cuda.device(d):
            torch.cuda.memory._record_memory_history(**kw)
    forever = [torch.empty(7 * MiB, dtype=torch.uint8, device=devs[0])]
    long_lived = [None] * 8
    recent = []

    def alloc(i, size):
        return torch.empty(size, dtype=torch.uint8, device=devs[i % devices])

    def step(i):
        recent.append(alloc(i, SIZES[i % 4]))
        scratch = alloc(i + 1, SIZES[(i * 7 + 1) % 4] // 2)
        recent.append(scratch[: 64])
        if len(recent) > 12:
            del recent[:2]
        if i % 1000 == 0:
            long_lived[(i // 1000) % 8] = alloc(i, 5 * MiB + (i // 1000) % 8 * 4096)
        if i % 5000 == 4999:
            big = alloc(i, 300 * MiB)
            del big
        if i % 20000 == 19999:
            torch.cuda.empty_cache()
        del scratch

    done = 0
    per_iteration = None
    t0 = time.monotonic()
    for n, count in enumerate(counts):
        if isinstance(count, str):
            count = done + int((float(count[:-1]) - last_bytes) / per_iteration * 1.02)
        for i in range(done, count):
            step(i)
        done = count
        for d in devs:
            torch.cuda.synchronize(d)
        name = case if n == 0 else f"{case}_{n + 1}"
        path = os.path.join(out, name + ".pickle")
        fig = {"case": case, "iterations": count, "at_dump": figures(devices),
               "settings": {"stacks": stacks, "context": context, "enabled": enabled,
                            "max_entries": max_entries, "user_pickled": user_pickled,
                            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
               "torch_version": torch.__version__, "device": torch.cuda.get_device_name(0),
               "record_s": round(time.monotonic() - t0, 2)}
        t1 = time.monotonic()
        if user_pickled:
            s = torch.cuda.memory._snapshot()
            with open(path, "wb") as f:
                pickle.dump(s, f)
            del s
        else:
            torch.cuda.memory._dump_snapshot(path)
        fig["dump_s"] = round(time.monotonic() - t1, 2)
        fig["bytes"] = last_bytes = os.path.getsize(path)
        per_iteration = max(1.0, last_bytes / max(1, count))
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(fig, f, indent=1)
        print(f"{name}: {count} iterations, {fig['bytes']} bytes, record {fig['record_s']} s, dump {fig['dump_s']} s")
        t0 = time.monotonic()


def site(frames):
    """The innermost Python line outside torch/ (memwatch's site for these stacks)."""
    for f in frames:
        fn = f.get("filename", "")
        if fn.endswith(".py") and "/torch/" not in fn:
            return f"{fn.rsplit('/', 1)[-1]}:{f.get('line')} in {f.get('name')}"
    return "unknown"


def check(snap, figs_path, report_path, python):
    fig = json.load(open(figs_path))
    rep = json.load(open(report_path))
    name = os.path.basename(snap).rsplit(".", 1)[0]
    bad, n = {}, 0
    devices = {d["device"]: d for d in rep["devices"]}

    def cmp(what, ours, theirs):
        nonlocal n
        n += 1
        if ours != theirs:
            bad[what] = {"memwatch": ours, "expected": theirs}

    for f in fig["at_dump"]:
        d = devices.get(f["device"])
        if d is None:
            if f["memory_reserved"]:
                bad[f"device {f['device']}"] = "missing from the report"
            continue
        tag = f"dev{f['device']} "
        cmp(tag + "allocated (torch)", d["allocated_bytes"], f["memory_allocated"])
        cmp(tag + "reserved (torch)", d["reserved_bytes"], f["memory_reserved"])
        if not fig["settings"]["alloc_conf"]:
            # Expandable segments are reported per mapped range, not per cudaMalloc.
            cmp(tag + "segments (torch)", d["segments"], f["segments"])
        cmp(tag + "active blocks (torch)", d["end_check"]["blocks"], f["active_blocks"])
        c = d["end_check"]
        cmp(tag + "replay ends on the dump", c["missing"] + c["extra"] + c["size_mismatches"], 0)
    if python:
        with open(snap, "rb") as fh:
            s = pickle.load(fh)
        for dev, d in devices.items():
            segs = [x for x in s["segments"] if x["device"] == dev]
            blocks = [b for x in segs for b in x["blocks"] if b["state"] == "active_allocated"]
            active = [b for x in segs for b in x["blocks"] if b["state"].startswith("active")]
            tag = f"dev{dev} "
            cmp(tag + "segments (python)", d["segments"], len(segs))
            cmp(tag + "allocated (python)", d["allocated_bytes"], sum(b["size"] for b in blocks))
            cmp(tag + "reserved (python)", d["reserved_bytes"], sum(x["total_size"] for x in segs))
            cmp(tag + "active blocks (python)", d["end_check"]["blocks"], len(active))
            by_site = {}
            for b in blocks:
                k = site(b.get("frames", []))
                by_site[k] = by_site.get(k, 0) + b["size"]
            ours = {x["site"]: x["bytes"] for x in d["at_end"]["by_site"]}
            for k, v in sorted(by_site.items(), key=lambda kv: -kv[1])[:5]:
                cmp(tag + f"bytes at {k} (python)", ours.get(k), v)
            traces = s.get("device_traces", [])
            entries = len(traces[dev]) if dev < len(traces) else 0
            cmp(tag + "trace entries (python)", d["trace_entries"], entries)
        del s
    status = "OK" if not bad else "FAIL"
    print(f"{name}: {status} {n - len(bad)}/{n} ({fig['bytes']} bytes, {fig['iterations']} iterations)",
          json.dumps(bad) if bad else "")
    return not bad


def measure(out, cmd):
    t = time.monotonic()
    rc = subprocess.call(cmd, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    rss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(out, "w") as f:
        json.dump({"cmd": cmd, "rc": rc, "seconds": round(wall, 2), "max_rss_kib": rss_kib}, f)
    return rc


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "record":
        record(sys.argv[2], sys.argv[3], [x if x.endswith("b") else int(x) for x in sys.argv[4:]])
    elif mode == "check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3], sys.argv[4], "--python" in sys.argv[5:]) else 1)
    elif mode == "load":
        with open(sys.argv[2], "rb") as fh:
            pickle.load(fh)
    elif mode == "measure":
        sys.exit(measure(sys.argv[2], sys.argv[4:]))
    else:
        sys.exit(f"unknown mode {mode}")
