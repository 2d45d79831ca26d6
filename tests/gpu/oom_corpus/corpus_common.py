"""Shared by the OOM corpus programs: what the framework itself says, written to figures.json.

Each program calls `figures = Figures()` first. Whatever it records (`figures.set(k, v)`),
plus the exception that ended it (type and full text) and the framework's own memory figures
at that moment, is written to $CORPUS_FIGURES (default figures.json) when the program ends —
also when it ends in an uncaught exception, which is re-raised unchanged so stderr and the
exit status are exactly what the framework produces.
"""
import atexit
import json
import os
import sys
import traceback

GiB = 1 << 30
MiB = 1 << 20


class Figures:
    def __init__(self):
        self.data = {"argv": sys.argv, "pid": os.getpid()}
        self.path = os.environ.get("CORPUS_FIGURES", "figures.json")
        self.probes = []
        atexit.register(self.write)
        prev = sys.excepthook

        def hook(tp, val, tb):
            self.exception(val)
            prev(tp, val, tb)

        sys.excepthook = hook

    def set(self, key, value):
        self.data[key] = value

    def probe(self, fn):
        """Registers fn() -> dict, called when the program ends, merged into the figures."""
        self.probes.append(fn)

    def exception(self, exc):
        self.data["exception"] = {
            "type": type(exc).__module__ + "." + type(exc).__name__,
            "text": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        }

    def write(self):
        for fn in self.probes:
            try:
                self.data.update(fn())
            except Exception as e:  # a probe must never hide the program's own outcome
                self.data.setdefault("probe_errors", []).append(repr(e))
        with open(self.path, "w") as f:
            json.dump(self.data, f, indent=1, default=str)


def jax_stats(dev=None):
    import jax
    dev = dev or jax.devices()[0]
    return {k: int(v) for k, v in (dev.memory_stats() or {}).items()}


def jax_analysis(compiled):
    ma = compiled.memory_analysis()
    keys = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes",
            "total_allocation_bytes"]
    return {k: int(getattr(ma, k)) for k in keys if hasattr(ma, k)}


def jax_env():
    import jax
    return {"jax_version": jax.__version__, "device": str(jax.devices()[0].device_kind),
            "allocator": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default"),
            "mem_fraction": os.environ.get("XLA_CLIENT_MEM_FRACTION",
                                           os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")),
            "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true")}


def torch_stats():
    import torch
    free, total = torch.cuda.mem_get_info()
    return {"memory_allocated": int(torch.cuda.memory_allocated()),
            "memory_reserved": int(torch.cuda.memory_reserved()),
            "max_memory_allocated": int(torch.cuda.max_memory_allocated()),
            "max_memory_reserved": int(torch.cuda.max_memory_reserved()),
            "device_free": int(free), "device_total": int(total),
            "torch_version": torch.__version__,
            "device": torch.cuda.get_device_name(0)}


def device_total_bytes():
    """The device's total memory as the driver reports it (before any framework starts)."""
    import subprocess
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                          "-i", os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[0]) * MiB
