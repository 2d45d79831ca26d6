"""Two processes share one GPU: a holder (CuPy) takes all but LEFT_GIB of the device, then a
JAX process with preallocation off grows its pool step by step until the device is full.
Both run under the same `memwatch run`, so the capture holds both.
argv: LEFT_GIB STEP_MIB
"""
import os
import subprocess
import sys
import time

left_gib, step_mib = float(sys.argv[1]), int(sys.argv[2])
here = os.path.dirname(os.path.abspath(__file__))
figdir = os.path.dirname(os.path.abspath(os.environ.get("CORPUS_FIGURES", "figures.json")))
env = dict(os.environ)
holder = subprocess.Popen([sys.executable, os.path.join(here, "two_processes_holder.py"), str(left_gib)],
                          stdout=subprocess.PIPE, text=True,
                          env=dict(env, CORPUS_FIGURES=os.path.join(figdir, "figures.holder.json")))
line = holder.stdout.readline()
print("holder:", line.strip(), flush=True)
worker = subprocess.run([sys.executable, os.path.join(here, "two_processes_worker.py"), str(step_mib)],
                        env=dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false"))
holder.terminate()
holder.wait(timeout=30)
sys.exit(worker.returncode)
