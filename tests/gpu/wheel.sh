#!/usr/bin/env bash
# The `memwatch` wheel on an NVIDIA GPU machine: a venv over the machine's Python with
# its JAX and PyTorch (--system-site-packages), the wheel installed from the file alone
# (pip --no-index: the machine needs no network), then, with the venv's memwatch (which
# finds its shim in the venv, no MEMWATCH_PRELOAD):
#   1. a real JAX run captured (`memwatch run`, XLA_PYTHON_CLIENT_ALLOCATOR=platform),
#      set against JAX's own figures (capture_frameworks.py compare) and `memwatch runtime`;
#   2. a real PyTorch run captured, set against PyTorch's own figures;
#   3. a PyTorch out-of-memory failure (oom_corpus/torch_fraction.py 0.03 256: tensors kept
#      until the per-process memory fraction stops the next one) captured, with the
#      doctor's verdict from `memwatch run` and from `memwatch diagnose` (must be
#      torch_fraction_limit, as tests/gpu/oom_corpus/run_verdict.sh expects);
#   4. memwatch_jax from the wheel on the GPU: memory_analysis() of a jitted function
#      written and gated (`memwatch gate --update`, then a check that passes), and
#      `python -m memwatch --version`.
#   bash tests/gpu/wheel.sh WHEEL [OUTDIR]     (OUTDIR default /tmp/memwatch-gpu-wheel)
# Writes OUTDIR/{venv,jax,torch,torch_oom,gate}/ and prints one line per check; exit 1
# when a check failed, 2 when the wheel could not be installed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
wheel=$(readlink -f "${1:?usage: tests/gpu/wheel.sh WHEEL [OUTDIR]}")
out=$(mkdir -p "${2:-/tmp/memwatch-gpu-wheel}" && cd "${2:-/tmp/memwatch-gpu-wheel}" && pwd)
py=${PYTHON:-python3}
unset MEMWATCH_PRELOAD XLA_FLAGS
export PYTHONUNBUFFERED=1
status=0
check() { # ok(0/1) what
  if [[ $1 == 0 ]]; then echo "ok    $2"; else
    echo "FAIL  $2"
    status=1
  fi
}

echo "== machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1); $("$py" -c 'import platform; print("Python", platform.python_version())'); glibc $(ldd --version | head -n 1 | awk '{print $NF}')"
echo "== wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"
v=$out/venv
pip=("$v/bin/pip")
if ! "$py" -m venv --system-site-packages "$v" 2>"$out/venv.err"; then
  # A Python without ensurepip (Debian's without python3-venv): a venv without pip, the
  # wheel installed into it by $py's own pip.
  echo "== venv with pip failed ($(tail -n 1 "$out/venv.err")): a venv without pip, $py's pip installs into it"
  rm -rf "$v"
  "$py" -m venv --system-site-packages --without-pip "$v" || exit 2
  pip=("$py" -m pip --python "$v/bin/python")
fi
t0=$(date +%s.%N)
"${pip[@]}" install -q --no-index --disable-pip-version-check "$wheel" || exit 2
t1=$(date +%s.%N)
echo "== pip install --no-index: $(echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}') s"
mw=$v/bin/memwatch
[[ -x $mw && -f $v/lib/memwatch/libmemwatch_preload.so ]]
check $? "the venv has bin/memwatch and lib/memwatch/libmemwatch_preload.so"
if ! "$v/bin/python" -c 'import jax, torch' 2>/dev/null && "$py" -c 'import jax, torch' 2>/dev/null; then
  # $py is itself a venv's, whose packages --system-site-packages does not reach: its
  # site-packages through a .pth file (same Python version: the venv was made by $py).
  sp=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  "$py" -c 'import site; print("\n".join(site.getsitepackages()))' >"$sp/_memwatch_outer.pth"
  echo "== $py is a venv's: its site-packages reached through $sp/_memwatch_outer.pth"
fi
"$v/bin/python" -c 'import jax, torch; print("== JAX", jax.__version__, jax.devices()[0].device_kind, "| PyTorch", torch.__version__, torch.cuda.get_device_name(0))'
check $? "the venv sees the machine's JAX and PyTorch"

# One capture under the venv's memwatch: NAME ENV... -- PROGRAM ARGS...
capture() {
  local name=$1 envs=()
  shift
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  local d=$out/$name
  rm -rf "$d"
  mkdir -p "$d"
  echo "== $name: memwatch run --out $d/capture.mwcap -- $(basename "$v")/bin/python $*"
  (cd "$d" && env "${envs[@]}" PYTHONPATH="$here:$here/oom_corpus" CORPUS_FIGURES="$d/figures.json" \
    timeout -k 10 300 "$mw" run --out capture.mwcap -- "$v/bin/python" "$@" >run.stdout 2>run.stderr)
  echo "   exit $?"
}

# -- 1. JAX --
capture jax XLA_PYTHON_CLIENT_ALLOCATOR=platform -- "$here/capture_frameworks.py" workload jax
"$mw" report "$out/jax/capture.mwcap" --json >"$out/jax/report.json" 2>"$out/jax/report.err"
check $? "jax: memwatch report reads the capture"
"$v/bin/python" "$here/capture_frameworks.py" compare "$out/jax/capture.mwcap" "$out/jax/run.stdout" | tee "$out/jax/compare.txt" | sed 's/^/   /'
"$v/bin/python" - "$out/jax/report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = sum(d["alloc_count"] for p in r["processes"] for d in p["devices"])
peak = max((d["peak_bytes"] for p in r["processes"] for d in p["devices"]), default=0)
print(f"   {len(r['processes'])} process(es), {r['events']} events, {n} device allocations, peak {peak / 2**20:.1f} MiB")
sys.exit(0 if n > 0 and peak >= 64 << 20 else 1)
EOF
check $? "jax: device allocations captured, the 64 MiB input among them"
"$mw" runtime "$out/jax/capture.mwcap" >"$out/jax/runtime.txt" 2>&1 && ! grep -q "no PJRT records" "$out/jax/runtime.txt"
check $? "jax: memwatch runtime finds the PJRT records (executables) the shim wrote"
sed -n '1,8p' "$out/jax/runtime.txt" | sed 's/^/   /'

# -- 2. PyTorch --
capture torch -- "$here/capture_frameworks.py" workload torch
"$mw" report "$out/torch/capture.mwcap" --json >"$out/torch/report.json" 2>"$out/torch/report.err"
check $? "torch: memwatch report reads the capture"
"$v/bin/python" "$here/capture_frameworks.py" compare "$out/torch/capture.mwcap" "$out/torch/run.stdout" | tee "$out/torch/compare.txt" | sed 's/^/   /'
"$v/bin/python" - "$out/torch/report.json" "$out/torch/run.stdout" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
fw = next(json.loads(l[len("FRAMEWORK "):]) for l in open(sys.argv[2]) if l.startswith("FRAMEWORK "))
peak = max((d["peak_bytes"] for p in r["processes"] for d in p["devices"]), default=0)
print(f"   capture peak {peak / 2**20:.1f} MiB; PyTorch reserved {fw['reserved_bytes'] / 2**20:.1f} MiB")
# The caching allocator's reserved segments are cudaMalloc calls the shim sees.
sys.exit(0 if peak >= fw["reserved_bytes"] > 0 else 1)
EOF
check $? "torch: the capture's peak covers what PyTorch reserved"

# -- 3. A PyTorch out-of-memory failure, diagnosed --
capture torch_oom -- "$here/oom_corpus/torch_fraction.py" 0.03 256
line=$(grep -m1 "^\[1\] " "$out/torch_oom/run.stderr")
echo "   memwatch run's verdict: $line"
[[ $line == *"torch_fraction_limit — failure"* ]]
check $? "torch_oom: memwatch run's verdict is torch_fraction_limit"
(cd "$out/torch_oom" && "$mw" diagnose capture.mwcap capture.stderr.log >diagnose.txt 2>&1 &&
  "$mw" diagnose capture.mwcap capture.stderr.log --json >diagnose.json)
check $? "torch_oom: memwatch diagnose runs on the capture and its stderr"
sed -n '1,12p' "$out/torch_oom/diagnose.txt" | sed 's/^/   /'
"$v/bin/python" -c "import json, sys; k = [v['kind'] for v in json.load(open(sys.argv[1]))['verdicts']]; print('   verdicts:', k); sys.exit(k[:1] != ['torch_fraction_limit'])" "$out/torch_oom/diagnose.json"
check $? "torch_oom: memwatch diagnose's verdict is torch_fraction_limit"

# -- 4. memwatch_jax and the gate, python -m memwatch --
d=$out/gate
rm -rf "$d"
mkdir -p "$d"
(
  cd "$d" && "$v/bin/python" - <<'EOF'
import jax, jax.numpy as jnp
from memwatch_jax import MemoryReport

def step(w, x):
    return jnp.tanh(x @ w).sum()

r = MemoryReport()
e = r.record(step, jax.ShapeDtypeStruct((4096, 4096), jnp.float32), jax.ShapeDtypeStruct((1024, 4096), jnp.float32))
r.write("memory.json")
print("   memwatch_jax:", e["name"], e["memory_analysis"]["argument_size_in_bytes"], "argument bytes")
EOF
)
check $? "memwatch_jax: memory_analysis() of a jitted function on the GPU written"
(cd "$d" && "$mw" gate --baseline baseline.toml --memory-analysis memory.json --update >update.txt &&
  "$mw" gate --baseline baseline.toml --memory-analysis memory.json >gate.txt)
check $? "gate: a baseline written from memwatch_jax's file, then checked (exit 0)"
ver=$("$v/bin/python" -m memwatch --version)
[[ $ver == "$("$mw" --version)" ]]
check $? "python -m memwatch --version: $ver"

echo "== $([[ $status == 0 ]] && echo passed || echo FAILED): outputs in $out"
exit $status
