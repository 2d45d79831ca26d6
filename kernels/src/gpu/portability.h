// memwatch replay kernels: the one portability header between HIP and CUDA.
//
// The kernels in replay_kernels.cu are written once against the names below. hipcc (AMD,
// `-x hip`) and nvcc (NVIDIA) both compile them; the host side loads the resulting code
// objects at run time (hipModuleLoadData / cuModuleLoadData), so nothing here links a
// runtime library. Kernel entry points are `extern "C"` so their names are not mangled and
// the Rust runner can look them up by name.
#ifndef MEMWATCH_GPU_PORTABILITY_H
#define MEMWATCH_GPU_PORTABILITY_H

#if defined(__HIPCC__) || defined(__HIP__)
#include <hip/hip_runtime.h>
#define MW_GPU_VENDOR "hip"
#elif defined(__CUDACC__)
#define MW_GPU_VENDOR "cuda"
#else
#error "replay kernels must be compiled by hipcc (-x hip) or nvcc"
#endif

// An entry point the host looks up by its plain C name.
#define MW_KERNEL extern "C" __global__
#define MW_DEVICE static __device__ __forceinline__

typedef unsigned long long mw_u64;
typedef unsigned int mw_u32;

// Global thread index and the grid-stride step, 64-bit so buffers over 4 GiB work.
MW_DEVICE mw_u64 mw_global_id() {
  return (mw_u64)blockIdx.x * (mw_u64)blockDim.x + (mw_u64)threadIdx.x;
}
MW_DEVICE mw_u64 mw_grid_stride() { return (mw_u64)gridDim.x * (mw_u64)blockDim.x; }

// 64-bit atomic add, the same spelling on both vendors.
MW_DEVICE void mw_atomic_add(mw_u64* p, mw_u64 v) { atomicAdd(p, v); }

#endif  // MEMWATCH_GPU_PORTABILITY_H
