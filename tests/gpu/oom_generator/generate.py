"""Draws random GPU-memory failures from a seed: each scenario is a framework, a cause,
allocator settings and sizes, and knows what really happened (its truth: whether the run
failed for memory, the doctor's kind, who held the memory, exact figures where the program
fixes them). Used by run.py; `python3 generate.py SEED N DEVICE_TOTAL_BYTES` prints the plan.

Sizes scale with the device (a pool is drawn in GiB and turned into the fraction of this
device that gives it), so the same seed means the same failures on an H100 or an H200.
"""
import json
import random
import sys

MiB = 1 << 20
GiB = 1 << 30
CORPUS = "../oom_corpus/"


def frac_for(pool_gib, total):
    """XLA_CLIENT_MEM_FRACTION that gives a pool of about pool_gib on this device."""
    return round(pool_gib * GiB / total, 4)


def truth(failed, kind, holder=None, figures=None, fatal=True):
    return {"failed": failed, "kind": kind, "holder": holder, "figures": figures or {},
            "fatal": fatal}


# Each cause: (weight, frameworks, draw(rng, total) -> (env, program, args, truth, framework)).

def c_leak_jax(rng, total):
    alloc = rng.choice(["bfc", "bfc", "bfc", "cuda_async", "platform"])
    rows = rng.choice([1024, 1536, 2048, 3072, 4096])
    cols = rng.choice([2048, 4096, 8192])
    pool = rng.uniform(2.0, 8.0)
    env = {"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool, total))}
    per = rows * cols * 4
    steps = int(pool * GiB / per) + 50 if alloc == "bfc" else int(pool * GiB / per) + 20
    leak_from = rng.choice([0, 0, 5, 12])
    if alloc != "bfc":
        env["XLA_PYTHON_CLIENT_ALLOCATOR"] = alloc
        # cuda_async / platform ignore the fraction: a warning, the run ends without an OOM.
        t = truth(False, "pool_limit_ignored", {"framework": "xla", "process": "self"}, fatal=False)
    else:
        t = truth(True, "leak", {"framework": "xla", "process": "self"},
                  {"growth_per_step_bytes": per})
    return env, CORPUS + "jax_leak.py", [steps, rows, cols, leak_from], t, "jax"


def torch_driver_group(sizes, expandable):
    """Bytes of one repeating group of the driver allocations that PyTorch's caching allocator
    makes for a loop that keeps tensors of these sizes (bytes, each > 1 MiB) every iteration and
    frees none: what memwatch can see of the loop's step. The allocator's rules (PyTorch 2.x
    CUDACachingAllocator): a request takes the smallest cached free block that fits, split when
    more than 1 MiB would remain; otherwise a new segment, 20 MiB for a request under 10 MiB,
    else the request rounded up to 2 MiB. With expandable segments the one segment grows by
    mapping 20 MiB pages. So one driver group can be several iterations (8 MiB tensors share
    20 MiB segments) or part of one (a 96 MiB tensor is five 20 MiB pages)."""
    if expandable:
        return 20 * MiB
    free, seq = [], []
    for _ in range(240):
        for s in sizes:
            fits = sorted(b for b in free if b >= s)
            if fits:
                free.remove(fits[0])
                rest = fits[0] - s
            else:
                seg = 20 * MiB if s < 10 * MiB else -(-s // (2 * MiB)) * 2 * MiB
                seq.append(seg)
                rest = seg - s
            if rest > MiB:
                free.append(rest)
    tail = seq[len(seq) // 3:]
    for p in range(1, len(tail) // 3):
        if all(tail[i] == tail[i + p] for i in range(len(tail) - p)):
            return sum(tail[:p])
    raise ValueError(f"no repeating driver group for sizes {sizes}")


def c_leak_torch(rng, total):
    sizes = None
    if rng.random() < 0.6:
        period = rng.choice([1, 1, 2, 3])
        sizes = [rng.choice([8, 16, 32, 64, 96]) for _ in range(period)]
        args = ["tensors", ",".join(map(str, sizes))]
    else:
        args = ["graph", rng.choice([1024, 2048, 4096]), rng.choice([2048, 4096])]
    env = {}
    if rng.random() < 0.4:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    figs = {}
    if sizes:
        # The step memwatch sees is the repeating group of driver allocations, not the
        # program's iteration (which makes no driver call of its own).
        figs["growth_per_step_bytes"] = torch_driver_group([s * MiB for s in sizes],
                                                           "PYTORCH_CUDA_ALLOC_CONF" in env)
    t = truth(True, "leak", {"framework": "torch", "process": "self"}, figs)
    return env, "programs/torch_leak_ramp.py", args, t, "torch"


def c_leak_torch_fraction(rng, total):
    frac = round(rng.uniform(0.02, 0.06), 3)
    t = truth(True, "leak", {"framework": "torch", "process": "self"})
    return {}, CORPUS + "torch_leak.py", [frac, rng.choice([1024, 2048, 3072, 4096]),
                                          rng.choice([1024, 2048, 3072])], t, "torch"


def c_leak_cupy(rng, total):
    size = rng.choice([64, 128, 256, 512])
    t = truth(True, "leak", {"framework": "cupy", "process": "self"},
              {"growth_per_step_bytes": size * MiB})
    return {}, "programs/cupy_leak.py", [size], t, "cupy"


def c_too_large(rng, total):
    fw = rng.choice(["jax", "torch"])
    ratio = round(rng.uniform(1.05, 1.8), 2)
    t = truth(True, "larger_than_device", {"framework": "xla" if fw == "jax" else "torch",
                                           "process": "self"})
    return {}, CORPUS + f"{fw}_too_large.py", [ratio], t, fw


def c_exec_temp(rng, total):
    layers = rng.choice([4, 6, 8])
    batch = rng.choice([16384, 20480, 24576])
    # XLA's peak for this MLP's value_and_grad, as its memory_analysis() said on an H200
    # (about 1.31 bytes of temp per byte of the layers' activations, plus ~0.9 GB of
    # arguments and outputs); the pool is drawn well below it.
    peak = 1.31 * layers * batch * 8192 * 4 + 0.9e9
    pool = peak * rng.uniform(0.45, 0.8) / GiB
    t = truth(True, "execute_temp", {"framework": "xla", "process": "self"})
    return ({"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool, total))}, CORPUS + "jax_exec_temp.py",
            [layers, batch, 8192, "float32"], t, "jax")


def c_scan_temp(rng, total):
    pool = rng.uniform(2.5, 5.0)
    steps = rng.choice([1536, 2048, 2560, 3072])
    width = rng.choice([1024, 1536])
    batch = rng.choice([384, 512])
    t = truth(True, "execute_temp", {"framework": "xla", "process": "self"})
    return ({"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool, total))}, CORPUS + "jax_scan_temp.py",
            [steps, width, batch], t, "jax")


def c_autotune(rng, total):
    n = rng.choice([8192, 10240, 12288, 14336, 16384])
    margin = rng.choice([200, 300, 400, 500, 700])
    t = truth(True, "compile_scratch", {"framework": "xla", "process": "self"})
    return {"TF_CPP_MIN_LOG_LEVEL": "0"}, CORPUS + "jax_autotune.py", [n, margin], t, "jax"


def c_fragmentation(rng, total):
    if rng.random() < 0.5:
        count = rng.choice([12, 14, 16, 20, 24])
        block = rng.choice([256, 288, 300, 384])
        request = int(block * rng.uniform(2.1, 3.5))
        # The pool's tail after the COUNT blocks must stay smaller than the request (else the
        # request fits there): pool = blocks + part of one request, rounded up by XLA to 2 MiB.
        pool_gib = (count * block + rng.uniform(0.2, 0.6) * request) / 1024
        t = truth(True, "fragmentation", {"framework": "xla", "process": "self"})
        return ({"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool_gib, total))},
                CORPUS + "jax_fragmentation.py", [count, block, request], t, "jax")
    seg = rng.choice([768, 1024])
    blk = rng.choice([192, 256])
    req = rng.choice([448, 512])
    t = truth(True, "fragmentation", {"framework": "torch", "process": "self"})
    return ({}, CORPUS + "torch_fragmentation.py",
            [rng.choice([6, 8]), seg, blk, req, rng.choice([128, 256])], t, "torch")


def c_limit_small(rng, total):
    fw = rng.choice(["torch", "cupy", "jax"])
    if fw == "torch":
        # Weights of different sizes (a load, not a loop that keeps one size: that is a leak
        # stopped by the cap) that add up to more than the fraction allows.
        frac = round(rng.uniform(0.02, 0.06), 3)
        cap_mib = frac * total / MiB
        sizes, want = [], cap_mib * rng.uniform(1.2, 1.8)
        while sum(sizes) < want:
            sizes.append(2 * rng.randrange(32, 512))
        t = truth(True, "torch_fraction_limit", {"framework": "torch", "process": "self"})
        return ({}, "programs/torch_weights_over_fraction.py",
                [frac, ",".join(map(str, sizes))], t, fw)
    if fw == "cupy":
        t = truth(True, "cupy_pool_limit", {"framework": "cupy", "process": "self"})
        return ({}, CORPUS + "cupy_limit.py",
                [rng.choice([1024, 1280, 1536, 2048]), rng.choice([80, 96, 112, 128])], t, fw)
    pool = rng.uniform(2.0, 6.0)
    size = rng.choice([256, 512, 768])
    count = int(pool * 1024 / size * rng.uniform(1.3, 2.0))
    t = truth(True, "pool_too_small", {"framework": "xla", "process": "self"})
    return ({"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool, total))},
            "programs/jax_weights_too_big.py", [count, size], t, fw)


def c_same_process_pool(rng, total):
    env = {}
    if rng.random() < 0.4:
        env["XLA_CLIENT_MEM_FRACTION"] = str(round(rng.uniform(0.5, 0.9), 2))
        left = 1 - float(env["XLA_CLIENT_MEM_FRACTION"])
    else:
        left = 0.25
    want = round(min(0.95, left + rng.uniform(0.05, 0.3)), 3)
    prog = rng.choice(["jax_torch_same.py", "jax_torch_same.py", "cupy_after_jax.py"])
    fw = "torch" if "torch" in prog else "cupy"
    t = truth(True, "other_framework_pool", {"framework": "xla", "process": "self"})
    return env, "programs/" + prog, [want], t, "jax+" + fw


def c_other_process(rng, total):
    if rng.random() < 0.3:
        t = truth(True, "other_process", {"framework": None, "process": "other"})
        return {}, CORPUS + "two_processes.py", [rng.choice([4, 5, 6, 8]),
                                                 rng.choice([256, 384, 512])], t, "jax"
    fw = rng.choice(["torch", "cupy"])
    hold = round(rng.uniform(0.5, 0.9), 2)
    t = truth(True, "other_process", {"framework": None, "process": "other"})
    return {}, "programs/victim_of_other.py", [fw, hold, rng.choice([128, 256, 512])], t, fw


def c_no_donation(rng, total):
    size_gib = rng.choice([2, 3, 4, 5, 6])
    # params + grads live, the update's output does not fit; with donation it would.
    pool = size_gib * 2.6 + 0.3
    t = truth(True, "missing_donation", {"framework": "xla", "process": "self"},
              {"output_bytes": size_gib * GiB})
    return ({"XLA_CLIENT_MEM_FRACTION": str(frac_for(pool, total))},
            "programs/jax_no_donation.py", [size_gib * 1024], t, "jax")


def c_recovered(rng, total):
    if rng.random() < 0.6:
        hold = round(rng.uniform(0.4, 0.85), 2)
        t = truth(False, "recovered", {"framework": None, "process": "other"}, fatal=False)
        return {}, "programs/jax_recovered.py", [hold], t, "jax"
    t = truth(False, "recovered", {"framework": "torch", "process": "self"}, fatal=False)
    return {}, "programs/torch_retry.py", [round(rng.uniform(1.1, 1.6), 2)], t, "torch"


def c_no_oom(rng, total):
    fw = rng.choice(["jax", "torch", "cupy"])
    env = {}
    if fw == "jax" and rng.random() < 0.5:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    t = truth(False, None, fatal=False)
    return env, "programs/fits.py", [fw, rng.choice([64, 256, 1024]), rng.choice([3, 10, 30])], t, fw


def c_crash(rng, total):
    fw = rng.choice(["jax", "torch", "cupy"])
    t = truth(False, None, fatal=True)
    return {}, "programs/crash.py", [fw, rng.choice([16, 64, 256])], t, fw


def c_launcher(rng, total):
    n = rng.choice([2, 3, 4])
    failing = rng.randrange(n)
    pool = rng.uniform(2.0, 5.0)
    rows = rng.choice([1024, 2048, 4096])
    cols = rng.choice([2048, 4096])
    t = truth(True, "leak", {"framework": "xla", "process": f"rank{failing}"},
              {"growth_per_step_bytes": rows * cols * 4})
    return ({}, "programs/launcher.py", [n, failing, frac_for(pool, total), rows, cols], t,
            "jax-launcher")


CAUSES = {
    "leak_jax": (5, c_leak_jax),
    "leak_torch": (5, c_leak_torch),
    "leak_torch_fraction": (2, c_leak_torch_fraction),
    "leak_cupy": (2, c_leak_cupy),
    "too_large": (3, c_too_large),
    "execute_temp": (3, c_exec_temp),
    "scan_temp": (3, c_scan_temp),
    "autotune": (3, c_autotune),
    "fragmentation": (3, c_fragmentation),
    "limit_small": (4, c_limit_small),
    "same_process_pool": (4, c_same_process_pool),
    "other_process": (4, c_other_process),
    "no_donation": (4, c_no_donation),
    "recovered": (4, c_recovered),
    "no_oom": (3, c_no_oom),
    "crash": (3, c_crash),
    "launcher": (3, c_launcher),
}


def plan(seed, n, total):
    """n scenarios drawn from seed: every cause at least once when n allows, the rest by weight."""
    rng = random.Random(seed)
    names = list(CAUSES)
    picks = names[:] if n >= len(names) else []
    weights = [CAUSES[c][0] for c in names]
    picks += rng.choices(names, weights=weights, k=n - len(picks))
    rng.shuffle(picks)
    out = []
    for i, cause in enumerate(picks):
        env, prog, args, t, fw = CAUSES[cause][1](rng, total)
        out.append({"name": f"s{seed % 100000:05d}_{i:03d}_{cause}", "cause": cause,
                    "framework": fw, "env": env, "program": prog,
                    "args": [str(a) for a in args], "truth": t})
    return out


if __name__ == "__main__":
    seed, n, total = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    json.dump(plan(seed, n, total), sys.stdout, indent=1)
    print()
