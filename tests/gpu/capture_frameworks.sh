#!/usr/bin/env bash
# Runs JAX (XLA_PYTHON_CLIENT_ALLOCATOR=platform, =cuda_async, default BFC), PyTorch and
# CuPy under the memwatch shim on an NVIDIA GPU and prints, for each, what the capture
# holds next to the framework's own memory figures.
#
#   tests/gpu/capture_frameworks.sh [SHIM.so] [OUTDIR]
#
# With `memwatch` on PATH (or MEMWATCH_BIN set) each workload runs under
# `memwatch run --out OUTDIR/NAME.mwcap --`; otherwise (probe mode) the shim is preloaded
# directly with MEMWATCH_SINK=file:OUTDIR/NAME.mwcap. MEMWATCH_DEBUG=1 is set so stderr
# shows, per hooked name, which lookup path (dlsym / getprocaddress) handed it out.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
shim="${1:-$here/../../target/release/libmemwatch_preload.so}"
out="${2:-/tmp/memwatch-gpu}"
mkdir -p "$out"
py="${PYTHON:-python3}"
mw="${MEMWATCH_BIN:-$(command -v memwatch || true)}"
export MEMWATCH_DEBUG=1 PYTHONUNBUFFERED=1

run_one() { # name, env assignments..., -- workload
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local cap="$out/$name.mwcap"
  rm -f "$cap"
  echo "=== $name ($([ -n "$mw" ] && echo "memwatch run" || echo "MEMWATCH_SINK=file"))"
  local t0=$(date +%s%N)
  if [ -n "$mw" ]; then
    env "${envs[@]}" "$mw" run --out "$cap" -- "$py" "$here/capture_frameworks.py" workload "$@" >"$out/$name.out" 2>"$out/$name.err"
  else
    env "${envs[@]}" LD_PRELOAD="$shim" MEMWATCH_SINK="file:$cap" "$py" "$here/capture_frameworks.py" workload "$@" >"$out/$name.out" 2>"$out/$name.err"
  fi
  local rc=$?
  echo "  exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  grep -h "^memwatch: " "$out/$name.err" | sort | uniq -c | sort -rn | head -40 | sed 's/^/  lookup /'
  grep -v "^memwatch: " "$out/$name.err" | grep -iE "error|Traceback" | head -5 | sed 's/^/  stderr: /'
  [ -f "$cap" ] && "$py" "$here/capture_frameworks.py" compare "$cap" "$out/$name.out" || echo "  no capture written"
  if [ -n "$mw" ] && [ -f "$cap" ]; then
    "$mw" report "$cap" >"$out/$name.report.txt" 2>&1
    sed -n '1,14p' "$out/$name.report.txt" | sed 's/^/  report: /'
  fi
}

run_one jax_platform XLA_PYTHON_CLIENT_ALLOCATOR=platform -- jax
run_one jax_cuda_async XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async -- jax
run_one jax_bfc XLA_PYTHON_CLIENT_PREALLOCATE=true -- jax
run_one torch PYTORCH_NO_CUDA_MEMORY_CACHING=0 -- torch
run_one cupy CUPY_DUMMY=1 -- cupy
