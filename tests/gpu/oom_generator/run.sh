#!/usr/bin/env bash
# The OOM doctor judged on failures nobody picked: draws N random GPU-memory failures from a
# seed (drawn at run time unless given), records each under `memwatch run` on this machine's
# NVIDIA GPUs (one scenario per GPU at a time), and prints accuracy per cause, the confusion
# table and the exit-to-verdict times of the verdicts memwatch printed at exit.
#
#   bash tests/gpu/oom_generator/run.sh MEMWATCH_BIN OUTDIR [SEED] [N]
#   GEN_PART=2/2 ... records the second half of the same plan (one GPU, calls of limited length)
#
# Needs JAX (CUDA), PyTorch, CuPy and nvidia-smi. Exit 0 when >= 95 % of the verdicts are right.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mw="${1:?memwatch binary}"; out="${2:?output folder}"; seed="${3:-}"; n="${4:-60}"
args=("$mw" "$out" -n "$n" --part "${GEN_PART:-1/1}")
[ -n "$seed" ] && args+=(--seed "$seed")
exec python3 "$here/run.py" "${args[@]}"
