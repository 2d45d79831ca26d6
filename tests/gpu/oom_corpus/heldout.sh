#!/usr/bin/env bash
# The OOM doctor on failures it was not tuned on: records the held-out scenarios of
# run_all.sh (names starting with h_: other shapes, sizes, fractions and allocators than the
# corpus in testdata/) on an NVIDIA GPU, then runs `memwatch diagnose` on each with the same
# inputs the corpus test gives it, and compares the verdict's kind with the kind the program
# was written to produce (and, for a JAX leak, the growth per step with the array the
# program keeps each step: rows x cols x 4 bytes).
#
#   bash tests/gpu/oom_corpus/heldout.sh MEMWATCH_BIN OUTDIR [PREFIX]
#
# PREFIX picks a batch of run_all.sh's held-out entries (default h_; h2_ is the second).
#
# Prints one line per scenario and a total; exit 0 when every verdict is right, 1 otherwise.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="$(readlink -f "${1:?memwatch binary}")"
out="$(mkdir -p "${2:?output folder}" && cd "$2" && pwd)"
prefix="${3:-h_}"
names=$(sed -n "s/^  \"\(${prefix}[a-z_0-9]*\)|.*/\1/p" "$here/run_all.sh")
# shellcheck disable=SC2086
bash "$here/run_all.sh" "$mw" "$out" $names
python3 - "$mw" "$out" $names <<'PY'
import json, os, subprocess, sys
mw, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
# The kind each program was written to produce (its docstring), not what memwatch said.
truth = {
    "jax_exec_temp.py": "execute_temp", "jax_scan_temp.py": "execute_temp",
    "jax_fragmentation.py": "fragmentation", "torch_fragmentation.py": "fragmentation",
    "torch_leak.py": "leak", "torch_too_large.py": "larger_than_device",
    "jax_too_large.py": "larger_than_device", "two_processes.py": "other_process",
    "jax_autotune.py": "compile_scratch", "jax_co_resident.py": "co_resident",
    "torch_fraction.py": "torch_fraction_limit", "cupy_limit.py": "cupy_pool_limit",
    "host_pinned.py": "host_pinned",
}
ok = 0
for name in names:
    d = os.path.join(out, name)
    sc = json.load(open(os.path.join(d, "scenario.json")))
    prog = sc["program"]
    argv = sc.get("args", [])
    env = sc.get("env", {})
    if prog == "jax_leak.py":
        alloc = env.get("XLA_PYTHON_CLIENT_ALLOCATOR")
        want = "pool_limit_ignored" if alloc in ("platform", "cuda_async") else "leak"
    else:
        want = truth[prog]
    args = [mw, "diagnose"]
    for f in ("capture.mwcap", "stderr.log", "nvsmi.csv", "snapshot.pickle"):
        if os.path.isfile(os.path.join(d, f)):
            args.append(os.path.join(d, f))
    if os.path.isdir(os.path.join(d, "dump")):
        args += ["--xla-dump", os.path.join(d, "dump")]
    for k, v in env.items():
        args += ["--env", f"{k}={v}"]
    p = subprocess.run(args + ["--json"], capture_output=True, text=True)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        print(f"FAIL {name}: diagnose exited {p.returncode}: {p.stderr.strip()[:300]}")
        continue
    verdicts = doc.get("verdicts", [])
    got = verdicts[0]["kind"] if verdicts else None
    also = verdicts[0].get("also", []) if verdicts else []
    note = ""
    good = got == want
    if good and prog == "jax_leak.py" and want == "leak":
        rows, cols = int(argv[1]), int(argv[2])
        growth = verdicts[0].get("figures", {}).get("growth_per_step_bytes")
        note = f" growth/step {growth} (program keeps {rows * cols * 4})"
        good = growth == rows * cols * 4
    ok += good
    print(f"{'PASS' if good else 'FAIL'} {name}: want {want}, got {got} also {also}{note}")
    print(f"     {doc.get('headline', '')[:220]}")
print(f"held-out verdicts right: {ok}/{len(names)}")
sys.exit(0 if ok == len(names) else 1)
PY
