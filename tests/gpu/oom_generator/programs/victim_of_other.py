"""Another process holds most of the device; this one (FRAMEWORK torch or cupy) then keeps
STEP_MIB arrays until the device is full.  argv: FRAMEWORK HOLD_FRACTION STEP_MIB
"""
import os
import subprocess
import sys
from gen_common import Figures

fig = Figures()
fw, hold, step = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]) << 20
here = os.path.dirname(os.path.abspath(__file__))
holder = subprocess.Popen([sys.executable, os.path.join(here, "holder.py"), str(hold)],
                          stdout=subprocess.PIPE, text=True)
line = holder.stdout.readline().split()
fig.set("holder_bytes", int(line[1]))
fig.set("holder_pid", int(line[2]))
fig.set("step_bytes", step)
kept = []
fig.probe(lambda: {"kept_bytes": len(kept) * step})
try:
    if fw == "torch":
        import torch
        while True:
            kept.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
    else:
        import cupy as cp
        while True:
            kept.append(cp.empty(step, dtype=cp.uint8))
finally:
    holder.terminate()
    holder.wait(timeout=30)
