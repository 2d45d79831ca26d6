"""Shared by the multi-GPU programs: rank, world, the figures file and the timestamp log.

Every worker writes `figures.rank<R>.json` (via the OOM corpus's `Figures`: what the framework
says, the exception that ended the worker) and `events.rank<R>.jsonl`: one line per moment the
analysis is checked against (compile start/end, NCCL init, steps), each with the wall clock and
CLOCK_MONOTONIC in ns, so a capture's timestamps can be matched to what the worker saw.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oom_corpus"))
from corpus_common import Figures, GiB, MiB  # noqa: E402,F401

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
LOCAL_RANK = int(os.environ.get("LOCAL_RANK", str(RANK)))
OUTDIR = os.environ.get("MG_OUT", ".")
CPU_TEST = os.environ.get("MG_CPU_TEST") == "1"  # local dry run of the scripts without a GPU


def figures():
    os.environ["CORPUS_FIGURES"] = os.path.join(OUTDIR, f"figures.rank{RANK}.json")
    fig = Figures()
    fig.set("rank", RANK)
    fig.set("world", WORLD)
    fig.set("local_rank", LOCAL_RANK)
    fig.set("cuda_visible_devices", os.environ.get("CUDA_VISIBLE_DEVICES"))
    return fig


_events = None


def mark(event, **extra):
    """Appends one timestamped line to events.rank<R>.jsonl (flushed at once)."""
    global _events
    if _events is None:
        _events = open(os.path.join(OUTDIR, f"events.rank{RANK}.jsonl"), "a", buffering=1)
    rec = {"rank": RANK, "pid": os.getpid(), "event": event,
           "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()}
    rec.update(extra)
    _events.write(json.dumps(rec) + "\n")
