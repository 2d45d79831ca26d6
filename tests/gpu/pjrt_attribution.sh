#!/usr/bin/env bash
# Issue 9 on a GPU (H100/H200, JAX 0.11 with its CUDA plugin, default BFC allocator):
# runs the fixture's MLP program and an OOM program under memwatch with XLA dumps on,
# prints `memwatch runtime` for each and checks it against JAX's own figures
# (memory_analysis(), memory_stats(), the RESOURCE_EXHAUSTED message).
#
#   tests/gpu/pjrt_attribution.sh [MEMWATCH_BIN] [SHIM.so] [OUTDIR]
#
# Build first: cargo build --release -p memwatch -p memwatch-preload
# With a `memwatch run` subcommand available the workloads run under it; otherwise the
# shim is preloaded directly (MEMWATCH_SINK=file:...). Exit 1 when a check fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
mw="${1:-$root/target/release/memwatch}"
shim="${2:-$root/target/release/libmemwatch_preload.so}"
out="${3:-/tmp/memwatch-pjrt}"
py="${PYTHON:-python3}"
mkdir -p "$out"
status=0
have_run=0
"$mw" run --help >/dev/null 2>&1 && have_run=1
"$py" -c 'import jax; print("jax", jax.__version__, jax.devices())' || exit 2

for prog in mlp oom; do
  cap="$out/$prog.mwcap"; dump="$out/$prog-dump"; truth="$out/$prog.truth.json"
  rm -rf "$cap" "$dump"
  extra=""
  [ "$prog" = oom ] && extra="XLA_CLIENT_MEM_FRACTION=0.025"
  echo "=== $prog ($([ $have_run = 1 ] && echo "memwatch run" || echo "LD_PRELOAD")) $extra"
  t0=$(date +%s%N)
  if [ $have_run = 1 ]; then
    env $extra XLA_FLAGS="--xla_dump_to=$dump --xla_dump_hlo_as_text" \
      "$mw" run --out "$cap" -- "$py" "$here/pjrt_attribution.py" "$prog" "$truth" >"$out/$prog.out" 2>"$out/$prog.err"
  else
    env $extra XLA_FLAGS="--xla_dump_to=$dump --xla_dump_hlo_as_text" LD_PRELOAD="$shim" \
      MEMWATCH_SINK="file:$cap" "$py" "$here/pjrt_attribution.py" "$prog" "$truth" >"$out/$prog.out" 2>"$out/$prog.err"
  fi
  echo "  exit $?, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  grep -iE "Traceback|Error" "$out/$prog.err" | head -5 | sed 's/^/  stderr: /'
  "$mw" runtime "$cap" --xla-dump "$dump" --top 8 | sed 's/^/  /'
  "$mw" runtime "$cap" --xla-dump "$dump" --top 8 --json >"$out/$prog.report.json" || status=1
  "$py" "$here/pjrt_attribution.py" compare "$truth" "$out/$prog.report.json" | sed 's/^/  /'
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done
exit $status
