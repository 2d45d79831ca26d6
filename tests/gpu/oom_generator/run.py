"""Records the generator's scenarios on the GPUs of this machine, each under `memwatch run`,
one scenario per GPU at a time, then scores the verdicts (score.py).

    python3 run.py MEMWATCH_BIN OUTDIR [--seed S] [-n N] [--timeout SECONDS]

Without --seed a seed is drawn at run time (and printed). Each scenario gets a folder
OUTDIR/NAME with capture.mwcap, stdout.log, stderr.log, run.json (memwatch's own report and
verdict at exit), figures*.json (what the framework itself said), dump/ (XLA text dump of
JAX scenarios), nvsmi.csv (nvidia-smi's samples of that GPU, kept for comparison only) and
scenario.json (the plan entry with its truth, the exit code and the wall time).
GEN_GPUS=0,2 limits the run to those GPUs. --part K/M records every M-th scenario from the K-th
(1-based) of the same plan, so a long run on one GPU fits in several calls of limited length;
score all parts together with `score.py OUTDIR --from-run`.
"""
import argparse
import concurrent.futures as cf
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate  # noqa: E402
import score  # noqa: E402


def gpus():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line.split(",") for line in out.strip().splitlines()]
    return [(int(i), int(m) << 20) for i, m in rows]


def leftovers(gpu):
    """pids of processes still holding memory on GPU index gpu."""
    p = subprocess.run(["nvidia-smi", "-i", str(gpu), "--query-compute-apps=pid", "--format=csv,noheader"],
                       capture_output=True, text=True)
    return [int(x) for x in p.stdout.split() if x.strip().isdigit()]


def run_one(mw, out, sc, gpu, timeout):
    d = os.path.join(out, sc["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    env = dict(os.environ, **sc["env"])
    env.update(CUDA_VISIBLE_DEVICES=str(gpu), PYTHONUNBUFFERED="1",
               CORPUS_FIGURES=os.path.join(d, "figures.json"), MEMWATCH_RUN_TIMING="1",
               PYTHONPATH=os.path.join(HERE, "programs") + os.pathsep + os.path.join(HERE, "..", "oom_corpus"))
    if "jax" in sc["framework"]:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={d}/dump --xla_dump_hlo_as_text").strip()
    smi = subprocess.Popen(["nvidia-smi", "-i", str(gpu), "--query-gpu=timestamp,memory.used,memory.total",
                            "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=open(os.path.join(d, "nvsmi.csv"), "w"), stderr=subprocess.DEVNULL)
    prog = os.path.normpath(os.path.join(HERE, sc["program"]))
    cmd = ["timeout", "-k", "10", str(timeout), mw, "run", "--quiet", "--out", os.path.join(d, "capture.mwcap"),
           "--json-out", os.path.join(d, "run.json"), "--", sys.executable, prog] + sc["args"]
    t0 = time.time()
    with open(os.path.join(d, "stdout.log"), "w") as so, open(os.path.join(d, "stderr.log"), "w") as se:
        rc = subprocess.run(cmd, cwd=d, env=env, stdout=so, stderr=se).returncode
    wall = time.time() - t0
    smi.terminate()
    smi.wait()
    left = leftovers(gpu)
    for pid in left:  # a program that outlived its timeout must not hold the next one's GPU
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    if os.path.isdir(os.path.join(d, "dump")):
        for root, _, files in os.walk(os.path.join(d, "dump")):
            for f in files:
                if not f.endswith(".txt"):
                    os.remove(os.path.join(root, f))
    sc = dict(sc, exit_code=rc, wall_s=round(wall, 2), gpu=gpu, killed_leftovers=left)
    json.dump(sc, open(os.path.join(d, "scenario.json"), "w"), indent=1)
    return sc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mw")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int)
    ap.add_argument("-n", type=int, default=60)
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--only", help="comma-separated causes to keep")
    ap.add_argument("--part", default="1/1", help="K/M: record every M-th scenario from the K-th")
    a = ap.parse_args()
    try:
        part, parts = (int(x) for x in a.part.split("/"))
        assert 1 <= part <= parts
    except (ValueError, AssertionError):
        ap.error(f"--part {a.part!r}: want K/M with 1 <= K <= M")
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1, 10**9)
    mw = os.path.abspath(a.mw)
    os.makedirs(a.out, exist_ok=True)
    devs = gpus()
    if os.environ.get("GEN_GPUS"):
        keep = {int(i) for i in os.environ["GEN_GPUS"].split(",")}
        devs = [d for d in devs if d[0] in keep]
    total = devs[0][1]
    scenarios = generate.plan(seed, a.n, total)
    if a.only:
        keep = set(a.only.split(","))
        scenarios = [s for s in scenarios if s["cause"] in keep]
    scenarios = scenarios[part - 1::parts]
    print(f"seed {seed} (part {part}/{parts}): {len(scenarios)} scenarios on {len(devs)} GPU(s) of {total / 2**30:.2f} GiB", flush=True)
    free = queue.Queue()
    for i, _ in devs:
        free.put(i)

    def task(sc):
        g = free.get()
        try:
            r = run_one(mw, a.out, sc, g, a.timeout)
            print(f"  {r['name']:<40} gpu {g} exit {r['exit_code']:>3} {r['wall_s']:7.1f} s", flush=True)
            return r
        finally:
            free.put(g)

    with cf.ThreadPoolExecutor(len(devs)) as ex:
        list(ex.map(task, scenarios))
    json.dump({"seed": seed, "n": a.n, "part": a.part, "recorded": len(scenarios),
               "device_total_bytes": total},
              open(os.path.join(a.out, f"seed-{seed}-part{part}of{parts}.json"), "w"))
    ok = score.main([a.out, "--from-run"] + [s["name"] for s in scenarios])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
