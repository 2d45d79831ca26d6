"""Another process on the device: holds FRACTION of the device's total (CuPy) and prints
`held BYTES PID` once it has it, then waits to be killed."""
import os
import signal
import sys
import time

import cupy as cp

frac = float(sys.argv[1])
free, total = cp.cuda.runtime.memGetInfo()
take = int(total * frac) // (2 << 20) * (2 << 20)
buf = cp.empty(take, dtype=cp.uint8)
cp.cuda.runtime.deviceSynchronize()
print(f"held {take} {os.getpid()}", flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(1)
