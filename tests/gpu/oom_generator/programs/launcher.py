"""A launcher with NWORKERS JAX workers on one device, each with its own pool
(XLA_CLIENT_MEM_FRACTION = FRACTION); worker FAILING keeps each step's output (a leak of
ROWSxCOLS f32 per step) until its pool is full, the others do a few steps and exit. All
workers dump to the same XLA dump folder when XLA_FLAGS says so.
argv: NWORKERS FAILING FRACTION ROWS COLS
"""
import os
import subprocess
import sys

n, failing, frac, rows, cols = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
here = os.path.dirname(os.path.abspath(__file__))
figdir = os.path.dirname(os.path.abspath(os.environ.get("CORPUS_FIGURES", "figures.json")))
procs = []
for rank in range(n):
    env = dict(os.environ, XLA_CLIENT_MEM_FRACTION=frac, RANK=str(rank),
               CORPUS_FIGURES=os.path.join(figdir, f"figures.rank{rank}.json"))
    args = [sys.executable, os.path.join(here, "launcher_worker.py"), str(int(rank == failing)), rows, cols]
    procs.append(subprocess.Popen(args, env=env))
codes = [p.wait() for p in procs]
print("worker exit codes", codes, flush=True)
sys.exit(max(codes))
