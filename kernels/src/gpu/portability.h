// memwatch replay kernels: the one portability header between HIP and CUDA.
//
// The kernels in replay_kernels.cu are written once against the names below. clang
// (`-x hip -nogpuinc -nogpulib`, any release whose AMDGPU back end knows the target:
// Debian's clang-19, ROCm's amdclang) and nvcc both compile them; the host side loads the
// resulting code objects at run time (hipModuleLoadData / cuModuleLoadData), so nothing
// here links a runtime library. The HIP side uses no HIP header and no device library:
// indices come from clang's AMDGPU builtins, so a code object builds for any target the
// compiler knows, without a ROCm install. Kernel entry points are `extern "C"` so their
// names are not mangled and the Rust runner can look them up by name.
#ifndef MEMWATCH_GPU_PORTABILITY_H
#define MEMWATCH_GPU_PORTABILITY_H

#if defined(__HIP__)
#define MW_GPU_VENDOR "hip"
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __forceinline__ inline __attribute__((always_inline))
// 16 bytes, 16-byte aligned, members .x .y .z .w (like HIP's uint4).
typedef unsigned int mw_u32x4 __attribute__((ext_vector_type(4)));
// Work-group (block) index, work-item (thread) index, work-group size and the grid's size
// in work-items: what HIP's blockIdx.x, threadIdx.x, blockDim.x and gridDim.x*blockDim.x
// read from the dispatch packet.
#define MW_BLOCK_ID_X() ((unsigned long long)__builtin_amdgcn_workgroup_id_x())
#define MW_THREAD_ID_X() ((unsigned long long)__builtin_amdgcn_workitem_id_x())
#define MW_BLOCK_DIM_X() ((unsigned long long)__builtin_amdgcn_workgroup_size_x())
#define MW_GRID_THREADS_X() ((unsigned long long)__builtin_amdgcn_grid_size_x())
#define MW_ATOMIC_ADD_U64(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#elif defined(__CUDACC__)
#define MW_GPU_VENDOR "cuda"
typedef uint4 mw_u32x4;
#define MW_BLOCK_ID_X() ((unsigned long long)blockIdx.x)
#define MW_THREAD_ID_X() ((unsigned long long)threadIdx.x)
#define MW_BLOCK_DIM_X() ((unsigned long long)blockDim.x)
#define MW_GRID_THREADS_X() ((unsigned long long)gridDim.x * (unsigned long long)blockDim.x)
#define MW_ATOMIC_ADD_U64(p, v) atomicAdd((p), (v))
#else
#error "replay kernels must be compiled as HIP by clang (-x hip) or as CUDA by nvcc"
#endif

// An entry point the host looks up by its plain C name.
#define MW_KERNEL extern "C" __global__
#define MW_DEVICE static __device__ __forceinline__

typedef unsigned long long mw_u64;
typedef unsigned int mw_u32;

// Global thread index and the grid-stride step, 64-bit so buffers over 4 GiB work.
MW_DEVICE mw_u64 mw_global_id() { return MW_BLOCK_ID_X() * MW_BLOCK_DIM_X() + MW_THREAD_ID_X(); }
MW_DEVICE mw_u64 mw_grid_stride() { return MW_GRID_THREADS_X(); }

// 64-bit atomic add, the same spelling on both vendors.
MW_DEVICE void mw_atomic_add(mw_u64* p, mw_u64 v) { MW_ATOMIC_ADD_U64(p, v); }

#endif  // MEMWATCH_GPU_PORTABILITY_H
