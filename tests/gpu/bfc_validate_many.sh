#!/usr/bin/env bash
# Validate memwatch's BFC model against the real XLA allocator on a GPU (H100/H200,
# JAX 0.11 with CUDA): record N new random traces with tests/gpu/bfc_record.py (each in a
# fresh process: preallocated and growing pools, several memory fractions and size
# profiles), replay each with `memwatch replay --steps --json`, and count exact matches.
#
# Usage: tests/gpu/bfc_validate_many.sh MEMWATCH_BIN [N=24] [OUT_DIR=bfc-validate-out]
# Needs: python3 with jax[cuda] (0.11.x) and numpy, one visible GPU.
# Prints one line per trace and a summary; exits 1 unless every trace matches exactly.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${1:?usage: $0 MEMWATCH_BIN [N] [OUT_DIR]}"
n="${2:-24}"
out="${3:-bfc-validate-out}"
[ -x "$bin" ] || { echo "not executable: $bin" >&2; exit 2; }
py="${PYTHON:-python3}"
"$py" -c 'import jax, numpy; d = jax.devices()[0]; assert d.platform == "gpu", d; print("jax", jax.__version__, d.device_kind)' \
  || { echo "needs jax with a GPU backend" >&2; exit 2; }
mkdir -p "$out"
fractions=(0.02 0.04 0.06)
profiles=(mixed small large churn)
: > "$out/results.jsonl"
for ((i = 0; i < n; i++)); do
  seed=$((1000 + i))
  prealloc=$([ $((i % 2)) -eq 0 ] && echo true || echo false)
  frac=${fractions[$((i % ${#fractions[@]}))]}
  prof=${profiles[$(((i / 2) % ${#profiles[@]}))]}
  rec="$out/rec_${seed}_${prof}_${prealloc}_${frac}.json"
  rep="${rec%.json}.replay.json"
  XLA_CLIENT_MEM_FRACTION=$frac XLA_PYTHON_CLIENT_PREALLOCATE=$prealloc TF_CPP_MIN_LOG_LEVEL=0 \
    "$py" "$here/bfc_record.py" "$seed" "$rec" --profile "$prof" > "${rec%.json}.stdout" 2> "${rec%.json}.log"
  # The recorded document carries bytes_limit and the preallocation mode; replay with them.
  "$bin" replay "$rec" --steps --json > "$rep"
  "$py" "$here/bfc_compare.py" "$rec" "$rep" | tee -a "$out/results.jsonl"
done
"$py" - "$out/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = sum(r["steps"] for r in rows)
matched = sum(r["matched"] for r in rows)
exact = sum(r["exact"] for r in rows)
ooms = sum(r["oom_real"] is not None for r in rows)
print(f"traces {len(rows)}, exact {exact}/{len(rows)}; steps {steps}, matched {matched}/{steps}; "
      f"runs that hit OOM {ooms}, OOM step reproduced {sum(r['oom_real'] == r['oom_model'] for r in rows)}/{len(rows)}")
sys.exit(0 if exact == len(rows) else 1)
PY
