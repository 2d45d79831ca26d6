"""The holder of two_processes.py: allocates all but LEFT_GIB of the device and waits."""
import signal
import sys
import time
from corpus_common import GiB, Figures

fig = Figures()
left = float(sys.argv[1])
import cupy as cp

free, total = cp.cuda.runtime.memGetInfo()
take = int(free - left * GiB)
buf = cp.cuda.alloc(take)
fig.set("held_bytes", take)
fig.set("device_free_before", int(free))
fig.set("device_total", int(total))
print(f"holding {take} bytes of {total}", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(0.2)
