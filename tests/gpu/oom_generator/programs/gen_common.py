"""Shared by the generator's programs: the corpus's Figures (what the framework itself said,
written to $CORPUS_FIGURES) plus a few helpers. The programs print nothing that memwatch
reads; their truth is written by generate.py before they run."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "oom_corpus"))
from corpus_common import GiB, MiB, Figures, device_total_bytes, jax_env, jax_stats, torch_stats  # noqa: E402,F401


def hold_with_cupy(nbytes):
    """Another process's memory: a CuPy allocation of nbytes, held until killed."""
    import cupy as cp
    return cp.empty(nbytes, dtype=cp.uint8)
