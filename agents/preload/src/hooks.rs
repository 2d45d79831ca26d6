//! The wrappers: one exported C function per intercepted API, plus the hook table.
//!
//! Owns the list of hooked functions (name, API family, wire `Api`, GetProcAddress base
//! name and minimum CUDA version of each variant), the real-function slots, and what
//! each wrapper records. Every wrapper calls the real function with its arguments
//! untouched and returns its result untouched; out-pointers are only read after a
//! successful call; errno is restored to what the real call left.

use crate::config::Family;
use crate::lifecycle::Lifecycle;
use crate::panic_guard;
use crate::real::real_dlsym;
use crate::record::{self, thread_state, Pending};
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};
use memwatch_wire::{Api, MemKind};

/// Returned when the real function cannot be found (hipErrorNotInitialized,
/// CUDA_ERROR_NOT_INITIALIZED and cudaErrorInitializationError are all 3).
const NOT_INITIALIZED: c_int = 3;

/// One hooked function.
pub struct HookInfo {
    /// Exported symbol name, NUL-terminated.
    pub sym: &'static str,
    /// Name a program passes to `*GetProcAddress` for it (without `_v2` / `_ptsz`).
    pub base: &'static str,
    /// Smallest CUDA version for which `cuGetProcAddress` hands out this variant.
    pub min_ver: u32,
    pub api: Api,
    pub family: Family,
    wrapper: Wrapper,
    idx: usize,
}

#[derive(Clone, Copy)]
struct Wrapper(*const ());
// SAFETY: a function address, immutable.
unsafe impl Sync for Wrapper {}

impl HookInfo {
    pub fn wrapper(&self) -> *mut c_void {
        self.wrapper.0 as *mut c_void
    }
    /// The real function, as far as known (NULL when not resolved yet).
    pub fn real(&self) -> *mut c_void {
        SLOTS
            .get(self.idx)
            .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire))
    }
    pub fn name(&self) -> &'static str {
        self.sym.trim_end_matches('\0')
    }
    pub fn is_ptsz(&self) -> bool {
        self.name().ends_with("_ptsz")
    }
    /// Forgets the real function (its library was unloaded).
    pub fn forget_real(&self) {
        if let Some(slot) = SLOTS.get(self.idx) {
            slot.store(core::ptr::null_mut(), Ordering::Release);
        }
    }

    /// Offers `p` as the real function; returns whether the slot now holds `p`.
    pub fn offer_real(&self, p: *mut c_void) -> bool {
        let Some(slot) = SLOTS.get(self.idx) else {
            return false;
        };
        match slot.compare_exchange(
            core::ptr::null_mut(),
            p,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(cur) if cur == p => true,
            Err(cur) => {
                // The library the known function came from was unloaded (dlclose, then
                // dlopen again at another address; its old range may hold another
                // object by now): the new one takes its place.
                // SAFETY: dladdr only inspects the loader's tables.
                let gone = unsafe {
                    let mut info: libc::Dl_info = core::mem::zeroed();
                    libc::dladdr(cur, &mut info) == 0 || info.dli_saddr != cur
                };
                gone && slot
                    .compare_exchange(cur, p, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }
        }
    }
}

/// The real function of hook `idx`, looked up with `dlsym(RTLD_NEXT)` the first time.
#[inline]
pub fn resolve(idx: usize) -> *mut c_void {
    let Some(slot) = SLOTS.get(idx) else {
        return core::ptr::null_mut();
    };
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    resolve_slow(idx)
}

#[cold]
fn resolve_slow(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let mut p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p.is_null() || p == h.wrapper() {
        // Not in the global scope: a library opened with RTLD_LOCAL whose own internal
        // references bound to our export. Ask the handles the program looked names up in.
        // SAFETY: NUL-terminated name.
        p = unsafe { crate::dl::lookup_in_known_handles(h.sym.as_ptr().cast(), h.wrapper()) };
    }
    if p.is_null() {
        return core::ptr::null_mut();
    }
    h.offer_real(p);
    h.real()
}

/// `*p` as a number after a successful call (`r == 0`), else 0.
///
/// # Safety
/// `p` is NULL or valid for reads once the call succeeded (the runtime wrote it).
#[inline]
unsafe fn optr(p: *mut *mut c_void, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: non-null out-pointer the runtime filled (caller's contract).
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// [`optr`] for a `u64` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ou64(p: *mut u64, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p }
    } else {
        0
    }
}

/// [`optr`] for a `u32` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ou32(p: *mut u32, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// [`optr`] for a `usize` out-pointer.
///
/// # Safety
/// As for [`optr`].
#[inline]
unsafe fn ousize(p: *mut usize, r: c_int) -> u64 {
    if r == 0 && !p.is_null() {
        // SAFETY: as in `optr`.
        unsafe { *p as u64 }
    } else {
        0
    }
}

/// Device ordinal from a `hipMemAllocationProp` / `CUmemAllocationProp`
/// (`location.type` at byte 8, `location.id` at byte 12; type 1 = device).
///
/// # Safety
/// `prop` is NULL or points to an allocation property struct (at least 16 bytes).
#[inline]
unsafe fn prop_device(prop: *const c_void, fallback: i32) -> i32 {
    if prop.is_null() {
        return fallback;
    }
    let w = prop as *const i32;
    // SAFETY: bytes 8..16 of the caller's property struct.
    unsafe {
        if *w.add(2) == 1 {
            *w.add(3)
        } else {
            fallback
        }
    }
}

macro_rules! hooks {
    (
        record { $( $fam:ident $api:ident $base:literal $ver:literal
            fn $name:ident($($a:ident: $t:ty),*) |$p:ident, $r:ident| $body:block )* }
        custom { $( $cfam:ident $capi:ident $cbase:literal $cver:literal fn $cname:ident; )* }
    ) => {
        /// Index of each hook in [`HOOKS`] / the slot table.
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Clone, Copy)]
        #[repr(usize)]
        pub enum H { $($name,)* $($cname,)* COUNT }

        static SLOTS: [AtomicPtr<c_void>; H::COUNT as usize] =
            [const { AtomicPtr::new(core::ptr::null_mut()) }; H::COUNT as usize];

        /// Every hooked function.
        pub static HOOKS: [HookInfo; H::COUNT as usize] = [
            $( HookInfo { sym: concat!(stringify!($name), "\0"), base: $base, min_ver: $ver,
                api: Api::$api, family: Family::$fam, wrapper: Wrapper($name as *const ()),
                idx: H::$name as usize }, )*
            $( HookInfo { sym: concat!(stringify!($cname), "\0"), base: $cbase, min_ver: $cver,
                api: Api::$capi, family: Family::$cfam, wrapper: Wrapper($cname as *const ()),
                idx: H::$cname as usize }, )*
        ];

        // x86-64 Linux: each export is an entry trampoline that saves the program's
        // frame pointer, return address and stack pointer in the thread block (unless a
        // hooked call is already in progress on this thread) and jumps to the wrapper;
        // `record::stack_sample` walks the program's stack from there. Five
        // instructions.
        $(
            /// Interposes the runtime function of the same name (see the module docs).
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            #[unsafe(naked)]
            #[cfg_attr(not(test), no_mangle)]
            #[allow(unused_variables)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                core::arch::naked_asm!(
                    "mov r11, qword ptr [rip + memwatch_thread_state@GOTTPOFF]",
                    "cmp byte ptr fs:[r11 + {guard}], 0",
                    "jne 2f",
                    "mov qword ptr fs:[r11 + {fp}], rbp",
                    "mov r10, qword ptr [rsp]",
                    "mov qword ptr fs:[r11 + {ret}], r10",
                    "lea r10, [rsp + 8]",
                    "mov qword ptr fs:[r11 + {sp}], r10",
                    "2:",
                    "jmp {inner}",
                    guard = const thread_state::OFF_IN_HOOK,
                    fp = const thread_state::OFF_CALLER_FP,
                    ret = const thread_state::OFF_CALLER_RET,
                    sp = const thread_state::OFF_CALLER_SP,
                    inner = sym wrappers::$name,
                )
            }

            /// Interposes the runtime function of the same name (see the module docs).
            ///
            /// # Safety
            /// Same contract as the runtime's function.
            #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
            #[cfg_attr(not(test), no_mangle)]
            pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                // SAFETY: the caller's arguments, under the runtime function's contract.
                unsafe { wrappers::$name($($a),*) }
            }
        )*

        /// The wrapper bodies (reached through the exports above). Memwatch's part and
        /// the real call run in one caught block; `returned` says whether the real call
        /// was made: when memwatch's part panicked before it, it is made after the
        /// catch, once, with the caller's arguments (`panic_guard`).
        mod wrappers {
            use super::*;
            $(
                /// # Safety
                /// Same contract as the runtime's function of the same name.
                #[allow(unused_variables, unused_unsafe)]
                pub(super) unsafe extern "C" fn $name($($a: $t),*) -> c_int {
                    type F = unsafe extern "C" fn($($t),*) -> c_int;
                    let real = resolve_guarded(H::$name as usize);
                    if real.is_null() {
                        return NOT_INITIALIZED;
                    }
                    // SAFETY: the real function of this hook has this C signature.
                    let real = unsafe { core::mem::transmute::<*mut c_void, F>(real) };
                    let mut returned: Option<c_int> = None;
                    panic_guard::catch(|| {
                        let Some(mut $p) = record::begin::<Lifecycle>(Family::$fam, Api::$api) else {
                            // SAFETY: the caller's arguments, passed on unchanged.
                            returned = Some(unsafe { real($($a),*) });
                            return;
                        };
                        // SAFETY: as above.
                        let $r = unsafe { real($($a),*) };
                        returned = Some($r);
                        $p.finished($r);
                        // SAFETY: the body reads out-pointers only through `optr` and
                        // friends, after the real call succeeded and when non-null.
                        unsafe { $body }
                        $p.commit();
                    });
                    match returned {
                        Some(r) => r,
                        // SAFETY: memwatch's part panicked before the real call.
                        None => unsafe { real($($a),*) },
                    }
                }
            )*
        }
    };
}

/// [`resolve`], or when memwatch's lookup itself panicked, the next definition of the
/// hook's name as the dynamic loader gives it (NULL when none).
#[inline(always)]
fn resolve_guarded(idx: usize) -> *mut c_void {
    match panic_guard::catch(|| resolve(idx)) {
        Some(p) => p,
        None => resolve_plain(idx),
    }
}

#[cold]
fn resolve_plain(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p == h.wrapper() {
        core::ptr::null_mut()
    } else {
        p
    }
}

use MemKind::{
    Device, HostPinned, Managed, PoolObject, StreamPool, VmmMap, VmmPhysical, VmmReserve,
};
type Ptr = *mut c_void;
type PPtr = *mut *mut c_void;

hooks! {
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

/// Shared body of the set-device hooks: the thread's device is updated even when the
/// call is nested (e.g. cudaSetDevice -> cuCtxSetCurrent); an event is recorded only
/// for a change (kind `set_device`) or a failure (kind `api_span` with the result).
///
/// # Safety
/// `call` calls the real function with the caller's arguments; `new_device` may call
/// into the runtime after a successful call.
unsafe fn set_device_common(
    idx: H,
    fam: Family,
    api: Api,
    handle: u64,
    call: impl FnOnce(*mut c_void) -> c_int,
    new_device: impl FnOnce() -> i32,
) -> c_int {
    let real = resolve_guarded(idx as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    let rec: Option<Pending> =
        panic_guard::catch(|| record::begin::<Lifecycle>(fam, api)).flatten();
    let r = call(real);
    panic_guard::catch(move || {
        let Some(mut p) = rec else {
            if r == 0 {
                thread_state::swap_device(new_device());
            }
            return;
        };
        p.finished(r);
        if r == 0 {
            let d = new_device();
            let prev = thread_state::swap_device(d);
            if prev == d {
                p.discard();
                return;
            }
            p.set_device(d, handle);
        } else {
            p.span(handle);
        }
        p.commit();
    });
    r
}

/// Interposes `hipSetDevice` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn hipSetDevice(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::hipSetDevice,
            Family::Hip,
            Api::HipSetDevice,
            dev as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(dev),
            || dev,
        )
    }
}

/// Interposes `cudaSetDevice` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaSetDevice(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::cudaSetDevice,
            Family::CudaRuntime,
            Api::CudaSetDevice,
            dev as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(dev),
            || dev,
        )
    }
}

static CU_CTX_GET_DEVICE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
/// The real cuCtxSetCurrent that `CU_CTX_GET_DEVICE` was looked up next to.
static CU_CTX_KEY: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The device of the current context, asked of the same library as cuCtxSetCurrent
/// (looked up again when that function changed; no reference to the library is kept).
fn ctx_device() -> i32 {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    let real = resolve(H::cuCtxSetCurrent as usize);
    let mut f = CU_CTX_GET_DEVICE.load(Ordering::Acquire);
    if f.is_null() || CU_CTX_KEY.load(Ordering::Acquire) != real {
        f = core::ptr::null_mut();
        // SAFETY: dladdr fills `info` for an address; the RTLD_NOLOAD handle is closed
        // again and only used to look one name up.
        unsafe {
            let mut info: libc::Dl_info = core::mem::zeroed();
            if !real.is_null() && libc::dladdr(real, &mut info) != 0 && !info.dli_fname.is_null() {
                let h = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
                if !h.is_null() {
                    f = real_dlsym()(h, c"cuCtxGetDevice".as_ptr());
                    crate::real::real_dlclose()(h);
                    CU_CTX_GET_DEVICE.store(f, Ordering::Release);
                    CU_CTX_KEY.store(real, Ordering::Release);
                }
            }
        }
    }
    if f.is_null() {
        return -1;
    }
    let mut d: c_int = -1;
    // SAFETY: the driver's cuCtxGetDevice, with a valid out-pointer.
    if unsafe { core::mem::transmute::<*mut c_void, F>(f)(&mut d) } != 0 {
        return -1;
    }
    d
}

/// Interposes `cuCtxSetCurrent` (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Ptr) -> c_int {
    type F = unsafe extern "C" fn(Ptr) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common(
            H::cuCtxSetCurrent,
            Family::CudaDriver,
            Api::CuCtxSetCurrent,
            ctx as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(ctx),
            || if ctx.is_null() { -1 } else { ctx_device() },
        )
    }
}

/// Interposes `hipGetProcAddress`: a hooked name's pointer is replaced by its wrapper
/// after a successful lookup (`dl::wrap_proc`).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn hipGetProcAddress(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded(H::hipGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { crate::dl::wrap_proc(Family::Hip, sym, pfn, ver, flags) });
    }
    r
}

/// Interposes `cuGetProcAddress` (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64) -> c_int;
    let real = resolve_guarded(H::cuGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe {
            crate::dl::wrap_proc(Family::CudaDriver, sym, pfn, ver, flags)
        });
    }
    r
}

/// Interposes `cuGetProcAddress_v2` (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded(H::cuGetProcAddress_v2 as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe {
            crate::dl::wrap_proc(Family::CudaDriver, sym, pfn, ver, flags)
        });
    }
    r
}
