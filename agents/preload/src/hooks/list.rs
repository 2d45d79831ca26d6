//! The list of hooked functions, in one place: for each, its API family, wire `Api`,
//! the base name a program passes to `*GetProcAddress`, the smallest CUDA version for
//! which `cuGetProcAddress` hands out that variant, its C signature and what its
//! wrapper records (`record`: `p` is the call's [`crate::record::Pending`], `r` the
//! real call's result), then the hooks whose wrappers are written out by hand
//! (`custom`). `hook_list!(m)` hands the list to macro `m`: `table` builds the hook
//! table from it, `hooks` the wrapper bodies, `exports` the exported symbols and their
//! addresses.

/// Calls macro `$then` with the list of hooked functions (see the module docs).
macro_rules! hook_list {
    ($then:ident) => {
        $then! {
        record {
            // ---- HIP ----
            Hip HipMalloc "hipMalloc" 0 fn hipMalloc(ptr: PPtr, size: usize) |p, r| { p.alloc(Device, optr(ptr, r), size as u64) }
            Hip HipFree "hipFree" 0 fn hipFree(ptr: Ptr) |p, r| { p.free(Device, ptr as u64, 0) }
            Hip HipMallocManaged "hipMallocManaged" 0 fn hipMallocManaged(ptr: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(Managed, optr(ptr, r), size as u64); p.ev.aux = flags as u64 }
            Hip HipMallocAsync "hipMallocAsync" 0 fn hipMallocAsync(ptr: PPtr, size: usize, stream: Ptr) |p, r| {
                p.alloc(StreamPool, optr(ptr, r), size as u64); p.ev.stream = stream as u64 }
            Hip HipFreeAsync "hipFreeAsync" 0 fn hipFreeAsync(ptr: Ptr, stream: Ptr) |p, r| {
                p.free(StreamPool, ptr as u64, 0); p.ev.stream = stream as u64 }
            Hip HipMallocFromPoolAsync "hipMallocFromPoolAsync" 0 fn hipMallocFromPoolAsync(ptr: PPtr, size: usize, pool: Ptr, stream: Ptr) |p, r| {
                p.alloc(StreamPool, optr(ptr, r), size as u64); p.ev.aux = pool as u64; p.ev.stream = stream as u64 }
            Hip HipHostMalloc "hipHostMalloc" 0 fn hipHostMalloc(ptr: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(HostPinned, optr(ptr, r), size as u64); p.ev.aux = flags as u64 }
            Hip HipHostFree "hipHostFree" 0 fn hipHostFree(ptr: Ptr) |p, r| { p.free(HostPinned, ptr as u64, 0) }
            Hip HipExtMallocWithFlags "hipExtMallocWithFlags" 0 fn hipExtMallocWithFlags(ptr: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(Device, optr(ptr, r), size as u64); p.ev.aux = flags as u64 }
            Hip HipMallocPitch "hipMallocPitch" 0 fn hipMallocPitch(ptr: PPtr, pitch: *mut usize, width: usize, height: usize) |p, r| {
                let pt = ousize(pitch, r);
                let bytes = if r == 0 { pt.saturating_mul(height as u64) } else { (width as u64).saturating_mul(height as u64) };
                p.alloc(Device, optr(ptr, r), bytes); p.ev.aux = pt }
            Hip HipHostRegister "hipHostRegister" 0 fn hipHostRegister(host: Ptr, size: usize, flags: u32) |p, r| {
                p.alloc(HostPinned, host as u64, size as u64); p.ev.aux = flags as u64 }
            Hip HipHostUnregister "hipHostUnregister" 0 fn hipHostUnregister(host: Ptr) |p, r| { p.free(HostPinned, host as u64, 0) }
            Hip HipMemCreate "hipMemCreate" 0 fn hipMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) |p, r| {
                p.alloc(VmmPhysical, ou64(handle, r), size as u64); p.ev.device = prop_device(prop, p.ev.device); p.ev.aux = flags }
            Hip HipMemRelease "hipMemRelease" 0 fn hipMemRelease(handle: u64) |p, r| { p.free(VmmPhysical, handle, 0) }
            Hip HipMemMap "hipMemMap" 0 fn hipMemMap(ptr: Ptr, size: usize, offset: usize, handle: u64, flags: u64) |p, r| {
                p.alloc(VmmMap, ptr as u64, size as u64); p.ev.aux = handle }
            Hip HipMemUnmap "hipMemUnmap" 0 fn hipMemUnmap(ptr: Ptr, size: usize) |p, r| { p.free(VmmMap, ptr as u64, size as u64) }
            Hip HipMemAddressReserve "hipMemAddressReserve" 0 fn hipMemAddressReserve(ptr: PPtr, size: usize, align: usize, addr: Ptr, flags: u64) |p, r| {
                p.alloc(VmmReserve, optr(ptr, r), size as u64); p.ev.aux = align as u64 }
            Hip HipMemAddressFree "hipMemAddressFree" 0 fn hipMemAddressFree(ptr: Ptr, size: usize) |p, r| { p.free(VmmReserve, ptr as u64, size as u64) }
            Hip HipMemPoolCreate "hipMemPoolCreate" 0 fn hipMemPoolCreate(pool: PPtr, props: *const c_void) |p, r| { p.alloc(PoolObject, optr(pool, r), 0) }
            Hip HipMemPoolDestroy "hipMemPoolDestroy" 0 fn hipMemPoolDestroy(pool: Ptr) |p, r| { p.free(PoolObject, pool as u64, 0) }
            Hip HipStreamCreate "hipStreamCreate" 0 fn hipStreamCreate(s: PPtr) |p, r| { let h = optr(s, r); p.span(h); p.ev.stream = h }
            Hip HipStreamCreateWithFlags "hipStreamCreateWithFlags" 0 fn hipStreamCreateWithFlags(s: PPtr, flags: u32) |p, r| {
                let h = optr(s, r); p.span(h); p.ev.stream = h }
            Hip HipStreamCreateWithPriority "hipStreamCreateWithPriority" 0 fn hipStreamCreateWithPriority(s: PPtr, flags: u32, prio: c_int) |p, r| {
                let h = optr(s, r); p.span(h); p.ev.stream = h }
            Hip HipStreamDestroy "hipStreamDestroy" 0 fn hipStreamDestroy(s: Ptr) |p, r| { p.span(s as u64); p.ev.stream = s as u64 }
            Hip HipModuleLoad "hipModuleLoad" 0 fn hipModuleLoad(m: PPtr, fname: *const c_char) |p, r| { p.span(optr(m, r)) }
            Hip HipModuleLoadData "hipModuleLoadData" 0 fn hipModuleLoadData(m: PPtr, image: *const c_void) |p, r| { p.span(optr(m, r)) }
            Hip HipModuleLoadDataEx "hipModuleLoadDataEx" 0 fn hipModuleLoadDataEx(m: PPtr, image: *const c_void, n: u32, opts: Ptr, vals: PPtr) |p, r| {
                p.span(optr(m, r)) }
            Hip HipModuleUnload "hipModuleUnload" 0 fn hipModuleUnload(m: Ptr) |p, r| { p.span(m as u64) }

            // ---- CUDA driver ----
            CudaDriver CuMemAlloc "cuMemAlloc" 3020 fn cuMemAlloc_v2(dptr: *mut u64, size: usize) |p, r| { p.alloc(Device, ou64(dptr, r), size as u64) }
            CudaDriver CuMemAllocV1 "cuMemAlloc" 0 fn cuMemAlloc(dptr: *mut u32, size: u32) |p, r| { p.alloc(Device, ou32(dptr, r), size as u64) }
            CudaDriver CuMemFree "cuMemFree" 3020 fn cuMemFree_v2(dptr: u64) |p, r| { p.free(Device, dptr, 0) }
            CudaDriver CuMemFreeV1 "cuMemFree" 0 fn cuMemFree(dptr: u32) |p, r| { p.free(Device, dptr as u64, 0) }
            CudaDriver CuMemAllocManaged "cuMemAllocManaged" 0 fn cuMemAllocManaged(dptr: *mut u64, size: usize, flags: u32) |p, r| {
                p.alloc(Managed, ou64(dptr, r), size as u64); p.ev.aux = flags as u64 }
            CudaDriver CuMemAllocPitch "cuMemAllocPitch" 3020 fn cuMemAllocPitch_v2(dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: u32) |p, r| {
                let pt = ousize(pitch, r);
                let bytes = if r == 0 { pt.saturating_mul(height as u64) } else { (width as u64).saturating_mul(height as u64) };
                p.alloc(Device, ou64(dptr, r), bytes); p.ev.aux = pt }
            CudaDriver CuMemHostAlloc "cuMemHostAlloc" 0 fn cuMemHostAlloc(pp: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(HostPinned, optr(pp, r), size as u64); p.ev.aux = flags as u64 }
            CudaDriver CuMemAllocHost "cuMemAllocHost" 3020 fn cuMemAllocHost_v2(pp: PPtr, size: usize) |p, r| { p.alloc(HostPinned, optr(pp, r), size as u64) }
            CudaDriver CuMemFreeHost "cuMemFreeHost" 0 fn cuMemFreeHost(ptr: Ptr) |p, r| { p.free(HostPinned, ptr as u64, 0) }
            CudaDriver CuMemAllocAsync "cuMemAllocAsync" 11020 fn cuMemAllocAsync(dptr: *mut u64, size: usize, s: Ptr) |p, r| {
                p.alloc(StreamPool, ou64(dptr, r), size as u64); p.ev.stream = s as u64 }
            CudaDriver CuMemAllocAsync "cuMemAllocAsync" 11020 fn cuMemAllocAsync_ptsz(dptr: *mut u64, size: usize, s: Ptr) |p, r| {
                p.alloc(StreamPool, ou64(dptr, r), size as u64); p.ev.stream = s as u64 }
            CudaDriver CuMemFreeAsync "cuMemFreeAsync" 11020 fn cuMemFreeAsync(dptr: u64, s: Ptr) |p, r| { p.free(StreamPool, dptr, 0); p.ev.stream = s as u64 }
            CudaDriver CuMemFreeAsync "cuMemFreeAsync" 11020 fn cuMemFreeAsync_ptsz(dptr: u64, s: Ptr) |p, r| { p.free(StreamPool, dptr, 0); p.ev.stream = s as u64 }
            CudaDriver CuMemAllocFromPoolAsync "cuMemAllocFromPoolAsync" 11020 fn cuMemAllocFromPoolAsync(dptr: *mut u64, size: usize, pool: Ptr, s: Ptr) |p, r| {
                p.alloc(StreamPool, ou64(dptr, r), size as u64); p.ev.aux = pool as u64; p.ev.stream = s as u64 }
            CudaDriver CuMemAllocFromPoolAsync "cuMemAllocFromPoolAsync" 11020 fn cuMemAllocFromPoolAsync_ptsz(dptr: *mut u64, size: usize, pool: Ptr, s: Ptr) |p, r| {
                p.alloc(StreamPool, ou64(dptr, r), size as u64); p.ev.aux = pool as u64; p.ev.stream = s as u64 }
            CudaDriver CuMemCreate "cuMemCreate" 0 fn cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) |p, r| {
                p.alloc(VmmPhysical, ou64(handle, r), size as u64); p.ev.device = prop_device(prop, p.ev.device); p.ev.aux = flags }
            CudaDriver CuMemRelease "cuMemRelease" 0 fn cuMemRelease(handle: u64) |p, r| { p.free(VmmPhysical, handle, 0) }
            CudaDriver CuMemMap "cuMemMap" 0 fn cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) |p, r| {
                p.alloc(VmmMap, ptr, size as u64); p.ev.aux = handle }
            CudaDriver CuMemUnmap "cuMemUnmap" 0 fn cuMemUnmap(ptr: u64, size: usize) |p, r| { p.free(VmmMap, ptr, size as u64) }
            CudaDriver CuMemAddressReserve "cuMemAddressReserve" 0 fn cuMemAddressReserve(ptr: *mut u64, size: usize, align: usize, addr: u64, flags: u64) |p, r| {
                p.alloc(VmmReserve, ou64(ptr, r), size as u64); p.ev.aux = align as u64 }
            CudaDriver CuMemAddressFree "cuMemAddressFree" 0 fn cuMemAddressFree(ptr: u64, size: usize) |p, r| { p.free(VmmReserve, ptr, size as u64) }
            CudaDriver CuMemPoolCreate "cuMemPoolCreate" 0 fn cuMemPoolCreate(pool: PPtr, props: *const c_void) |p, r| { p.alloc(PoolObject, optr(pool, r), 0) }
            CudaDriver CuMemPoolDestroy "cuMemPoolDestroy" 0 fn cuMemPoolDestroy(pool: Ptr) |p, r| { p.free(PoolObject, pool as u64, 0) }
            CudaDriver CuStreamCreate "cuStreamCreate" 0 fn cuStreamCreate(s: PPtr, flags: u32) |p, r| { let h = optr(s, r); p.span(h); p.ev.stream = h }
            CudaDriver CuStreamCreateWithPriority "cuStreamCreateWithPriority" 0 fn cuStreamCreateWithPriority(s: PPtr, flags: u32, prio: c_int) |p, r| {
                let h = optr(s, r); p.span(h); p.ev.stream = h }
            CudaDriver CuStreamDestroy "cuStreamDestroy" 4000 fn cuStreamDestroy_v2(s: Ptr) |p, r| { p.span(s as u64); p.ev.stream = s as u64 }
            CudaDriver CuModuleLoad "cuModuleLoad" 0 fn cuModuleLoad(m: PPtr, fname: *const c_char) |p, r| { p.span(optr(m, r)) }
            CudaDriver CuModuleLoadData "cuModuleLoadData" 0 fn cuModuleLoadData(m: PPtr, image: *const c_void) |p, r| { p.span(optr(m, r)) }
            CudaDriver CuModuleLoadDataEx "cuModuleLoadDataEx" 0 fn cuModuleLoadDataEx(m: PPtr, image: *const c_void, n: u32, opts: Ptr, vals: PPtr) |p, r| {
                p.span(optr(m, r)) }
            CudaDriver CuModuleUnload "cuModuleUnload" 0 fn cuModuleUnload(m: Ptr) |p, r| { p.span(m as u64) }

            // ---- CUDA runtime ----
            CudaRuntime CudaMalloc "cudaMalloc" 0 fn cudaMalloc(ptr: PPtr, size: usize) |p, r| { p.alloc(Device, optr(ptr, r), size as u64) }
            CudaRuntime CudaFree "cudaFree" 0 fn cudaFree(ptr: Ptr) |p, r| { p.free(Device, ptr as u64, 0) }
            CudaRuntime CudaMallocManaged "cudaMallocManaged" 0 fn cudaMallocManaged(ptr: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(Managed, optr(ptr, r), size as u64); p.ev.aux = flags as u64 }
            CudaRuntime CudaMallocAsync "cudaMallocAsync" 0 fn cudaMallocAsync(ptr: PPtr, size: usize, s: Ptr) |p, r| {
                p.alloc(StreamPool, optr(ptr, r), size as u64); p.ev.stream = s as u64 }
            CudaRuntime CudaMallocAsync "cudaMallocAsync" 0 fn cudaMallocAsync_ptsz(ptr: PPtr, size: usize, s: Ptr) |p, r| {
                p.alloc(StreamPool, optr(ptr, r), size as u64); p.ev.stream = s as u64 }
            CudaRuntime CudaFreeAsync "cudaFreeAsync" 0 fn cudaFreeAsync(ptr: Ptr, s: Ptr) |p, r| { p.free(StreamPool, ptr as u64, 0); p.ev.stream = s as u64 }
            CudaRuntime CudaFreeAsync "cudaFreeAsync" 0 fn cudaFreeAsync_ptsz(ptr: Ptr, s: Ptr) |p, r| { p.free(StreamPool, ptr as u64, 0); p.ev.stream = s as u64 }
            CudaRuntime CudaMallocHost "cudaMallocHost" 0 fn cudaMallocHost(ptr: PPtr, size: usize) |p, r| { p.alloc(HostPinned, optr(ptr, r), size as u64) }
            CudaRuntime CudaHostAlloc "cudaHostAlloc" 0 fn cudaHostAlloc(ptr: PPtr, size: usize, flags: u32) |p, r| {
                p.alloc(HostPinned, optr(ptr, r), size as u64); p.ev.aux = flags as u64 }
            CudaRuntime CudaFreeHost "cudaFreeHost" 0 fn cudaFreeHost(ptr: Ptr) |p, r| { p.free(HostPinned, ptr as u64, 0) }
        }
        custom {
            Hip HipSetDevice "hipSetDevice" 0 fn hipSetDevice;
            CudaRuntime CudaSetDevice "cudaSetDevice" 0 fn cudaSetDevice;
            CudaDriver CuCtxSetCurrent "cuCtxSetCurrent" 0 fn cuCtxSetCurrent;
            Hip Unknown "hipGetProcAddress" 0 fn hipGetProcAddress;
            CudaDriver Unknown "cuGetProcAddress" 11030 fn cuGetProcAddress;
            CudaDriver Unknown "cuGetProcAddress" 12000 fn cuGetProcAddress_v2;
        }
        }
    };
}
pub(crate) use hook_list;
