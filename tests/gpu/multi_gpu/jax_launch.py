"""Starts one JAX worker per GPU on this host (jax.distributed over localhost), the way a
launcher script or a cluster's task-per-GPU does, and waits for them.

  python3 jax_launch.py N MODE ARGS...      (MODE, ARGS: see jax_worker.py)

Each worker gets RANK, WORLD_SIZE, LOCAL_RANK, MG_COORD and, when MG_DUMP_BASE is set, its own
XLA dump folder (MG_DUMP_BASE/rank<R>, appended to XLA_FLAGS). When one worker fails, the others
get MG_GRACE seconds (default 20) to finish, then SIGTERM, as torchrun does. Exit status: the
first failing worker's, else 0.
"""
import os
import socket
import subprocess
import sys
import time

n = int(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
procs = []
for r in range(n):
    env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
               MG_COORD=f"127.0.0.1:{port}")
    base = os.environ.get("MG_DUMP_BASE")
    if base:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                            f" --xla_dump_to={base}/rank{r} --xla_dump_hlo_as_text").strip()
    procs.append(subprocess.Popen([sys.executable, os.path.join(here, "jax_worker.py")] + sys.argv[2:], env=env))
grace = float(os.environ.get("MG_GRACE", "20"))
first_fail, fail_at = None, None
while any(p.poll() is None for p in procs):
    for r, p in enumerate(procs):
        if p.returncode not in (None, 0) and first_fail is None:
            first_fail, fail_at = p.returncode, time.monotonic()
            print(f"launcher: worker {r} (pid {p.pid}) exited {p.returncode}", flush=True)
    if fail_at is not None and time.monotonic() - fail_at > grace:
        for r, p in enumerate(procs):
            if p.poll() is None:
                print(f"launcher: stopping worker {r} (pid {p.pid})", flush=True)
                p.terminate()
        break
    time.sleep(0.1)
for p in procs:
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
codes = [p.returncode for p in procs]
print("launcher: exit codes", codes, flush=True)
bad = [c for c in codes if c != 0]
sys.exit(first_fail if first_fail is not None else (bad[0] if bad else 0))
