#!/usr/bin/env bash
# Builds the CUDA replay kernels (the same source as the HIP build, src/gpu/replay_kernels.cu)
# into one fatbin for sm_80 (A100) and sm_90 (H100/H200), plus compute_90 PTX so newer GPUs
# can JIT it. The runner loads it with cuModuleLoadData: `memwatch replay ... --on-gpu
# --kernels OUT`. Needs nvcc (CUDA 12 or newer); run it on the GPU machine.
# Usage: kernels/build-cuda.sh [OUT.fatbin]   (default: kernels/target-cuda/replay_kernels.fatbin)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/target-cuda/replay_kernels.fatbin}"
NVCC="${NVCC:-nvcc}"
command -v "$NVCC" >/dev/null || { echo "build-cuda.sh: nvcc not found (set NVCC=/path/to/nvcc)" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
"$NVCC" --version | tail -1
"$NVCC" -fatbin -O3 -std=c++14 \
  -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_90,code=compute_90 \
  -o "$out" "$here/src/gpu/replay_kernels.cu"
echo "build-cuda.sh: wrote $out ($(stat -c %s "$out") bytes) for sm_80, sm_90 (+compute_90 PTX)"
