// memwatch replay kernels (one source for HIP and CUDA, see portability.h).
//
// mw_touch     writes a position- and seed-dependent pattern to every byte of a range, so
//              every page of a lazily committed (or unified / GTT) allocation is backed.
// mw_checksum  counts the 16-byte words of a range that no longer hold the pattern that
//              mw_touch wrote with the same seed: 0 means the data survived (no other
//              allocation overlapped it).
// mw_strided   read-modify-write over a range with a stride, reproducing a buffer's
//              bandwidth use; `passes` times. Each pass inverts every word it visits, so
//              with a stride coprime to the word count (every word visited exactly once
//              per pass) an even number of passes leaves the data as it was.
//
// Ranges are (base, nbytes): base is 16-byte aligned (driver allocations are >= 256-byte
// aligned and memwatch's BFC placements 256-byte aligned); a tail that is not a multiple of
// 16 bytes is handled byte by byte.
#include "portability.h"

// The pattern word for 32-bit lane `i` of a buffer written with `seed` (a cheap mix,
// different for every position so that shifted or overlapping data is caught).
MW_DEVICE mw_u32 mw_pattern(mw_u64 i, mw_u32 seed) {
  mw_u32 x = (mw_u32)(i ^ (i >> 32)) * 0x9E3779B1u ^ seed;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  return x;
}

MW_KERNEL void mw_touch(mw_u64 base, mw_u64 nbytes, mw_u32 seed) {
  mw_u32x4* p = (mw_u32x4*)base;
  const mw_u64 nvec = nbytes / 16;
  const mw_u64 step = mw_grid_stride();
  for (mw_u64 v = mw_global_id(); v < nvec; v += step) {
    const mw_u64 w = v * 4;
    mw_u32x4 val;
    val.x = mw_pattern(w, seed);
    val.y = mw_pattern(w + 1, seed);
    val.z = mw_pattern(w + 2, seed);
    val.w = mw_pattern(w + 3, seed);
    p[v] = val;
  }
  if (mw_global_id() == 0) {
    unsigned char* b = (unsigned char*)base;
    for (mw_u64 i = nvec * 16; i < nbytes; ++i) b[i] = (unsigned char)(mw_pattern(i / 4, seed) >> (8 * (i % 4)));
  }
}

MW_KERNEL void mw_checksum(mw_u64 base, mw_u64 nbytes, mw_u32 seed, mw_u64 mismatches_out) {
  const mw_u32x4* p = (const mw_u32x4*)base;
  mw_u64* out = (mw_u64*)mismatches_out;
  const mw_u64 nvec = nbytes / 16;
  const mw_u64 step = mw_grid_stride();
  mw_u64 bad = 0;
  for (mw_u64 v = mw_global_id(); v < nvec; v += step) {
    const mw_u64 w = v * 4;
    const mw_u32x4 val = p[v];
    bad += (val.x != mw_pattern(w, seed)) | (val.y != mw_pattern(w + 1, seed)) |
           (val.z != mw_pattern(w + 2, seed)) | (val.w != mw_pattern(w + 3, seed));
  }
  if (mw_global_id() == 0) {
    const unsigned char* b = (const unsigned char*)base;
    for (mw_u64 i = nvec * 16; i < nbytes; ++i)
      bad += b[i] != (unsigned char)(mw_pattern(i / 4, seed) >> (8 * (i % 4)));
  }
  if (bad) mw_atomic_add(out, bad);
}

MW_KERNEL void mw_strided(mw_u64 base, mw_u64 nbytes, mw_u64 stride_vec, mw_u32 passes) {
  mw_u32x4* p = (mw_u32x4*)base;
  const mw_u64 nvec = nbytes / 16;
  if (nvec == 0) return;
  const mw_u64 step = mw_grid_stride();
  for (mw_u32 pass = 0; pass < passes; ++pass) {
    for (mw_u64 v = mw_global_id(); v < nvec; v += step) {
      const mw_u64 j = (v * stride_vec) % nvec;
      mw_u32x4 val = p[j];
      val.x = ~val.x;
      val.y = ~val.y;
      val.z = ~val.z;
      val.w = ~val.w;
      p[j] = val;
    }
  }
}
