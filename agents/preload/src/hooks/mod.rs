//! The wrappers of the hooked runtime functions: what each does around the real call.
//!
//! Owns the body of every wrapper (`list` names them, `table` holds their real-function
//! slots): finding the real function ([`resolve`]), calling it with the caller's
//! arguments untouched and returning its result untouched, and recording through the
//! hot path (`record`); out-pointers are only read after a successful call; errno is
//! restored to what the real call left. Also which wrapper a program is given for a
//! hooked name it looks up at run time ([`wrap_result`]: for `dlsym`, in `dl`, and for
//! the GetProcAddress family here, through which cudart gets the driver's functions).
//! When a different real function is already remembered for that name, the real
//! pointer is returned unwrapped (never a behaviour change, only a missed record).
//!
//! A leaf above `record`: the bodies are generic over [`Shim`], which brings what only
//! the layers above know (the start-up of `lifecycle`, the exported addresses). The
//! exported symbols themselves are `exports`', which instantiates every body with
//! `lifecycle::Lifecycle`; `lifecycle`, the flusher and the sink never reach up into
//! this module.

use crate::config::Family;
use crate::known_libs::lookup_in_known_handles;
use crate::panic_guard;
use crate::real::real_dlsym;
use crate::record::{self, state, thread_state, Pending, StartUp};
use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};
use memwatch_wire::{Api, MemKind};

pub(crate) mod list;
pub mod table;

pub use table::{HookInfo, H, HOOKS};

/// Returned when the real function cannot be found (hipErrorNotInitialized,
/// CUDA_ERROR_NOT_INITIALIZED and cudaErrorInitializationError are all 3).
const NOT_INITIALIZED: c_int = 3;

/// What the wrappers need from the layers above them, handed in by `exports`, which
/// instantiates every wrapper body with it: the start-up ([`StartUp`], `lifecycle`'s)
/// and the address of each exported wrapper (what a program is given, and what a
/// lookup must never take for the real function).
pub trait Shim: StartUp {
    /// The exported wrapper of hook `idx` (NULL for no such hook).
    fn wrapper(idx: usize) -> *mut c_void;
}

/// The real function of hook `idx`, looked up with `dlsym(RTLD_NEXT)` the first time.
#[inline]
pub fn resolve<S: Shim>(idx: usize) -> *mut c_void {
    let p = table::slot(idx);
    if !p.is_null() {
        return p;
    }
    resolve_slow::<S>(idx)
}

#[cold]
fn resolve_slow<S: Shim>(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let mut p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p.is_null() || p == S::wrapper(h.idx) {
        // Not in the global scope: a library opened with RTLD_LOCAL whose own internal
        // references bound to our export. Ask the handles the program looked names up in.
        // SAFETY: NUL-terminated name.
        p = unsafe { lookup_in_known_handles(h.sym.as_ptr().cast(), S::wrapper(h.idx)) };
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
        $(
            /// The body of the `exports` function of the same name (reached through its
            /// entry trampoline). Memwatch's part and the real call run in one caught
            /// block; `returned` says whether the real call was made: when memwatch's
            /// part panicked before it, it is made after the catch, once, with the
            /// caller's arguments (`panic_guard`).
            ///
            /// # Safety
            /// Same contract as the runtime's function of the same name.
            #[allow(unused_variables, unused_unsafe)]
            pub unsafe extern "C" fn $name<S: Shim>($($a: $t),*) -> c_int {
                type F = unsafe extern "C" fn($($t),*) -> c_int;
                let real = resolve_guarded::<S>(H::$name as usize);
                if real.is_null() {
                    return NOT_INITIALIZED;
                }
                // SAFETY: the real function of this hook has this C signature.
                let real = unsafe { core::mem::transmute::<*mut c_void, F>(real) };
                let mut returned: Option<c_int> = None;
                panic_guard::catch(|| {
                    let Some(mut $p) = record::begin::<S>(Family::$fam, Api::$api) else {
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
    };
}

/// [`resolve`], or when memwatch's lookup itself panicked, the next definition of the
/// hook's name as the dynamic loader gives it (NULL when none).
#[inline(always)]
fn resolve_guarded<S: Shim>(idx: usize) -> *mut c_void {
    match panic_guard::catch(|| resolve::<S>(idx)) {
        Some(p) => p,
        None => resolve_plain::<S>(idx),
    }
}

#[cold]
fn resolve_plain<S: Shim>(idx: usize) -> *mut c_void {
    let Some(h) = HOOKS.get(idx) else {
        return core::ptr::null_mut();
    };
    // SAFETY: NUL-terminated name; RTLD_NEXT from our own code means "after this shim".
    let p = unsafe { real_dlsym()(libc::RTLD_NEXT, h.sym.as_ptr().cast()) };
    if p == S::wrapper(h.idx) {
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

list::hook_list!(hooks);

/// Shared body of the set-device hooks: the thread's device is updated even when the
/// call is nested (e.g. cudaSetDevice -> cuCtxSetCurrent); an event is recorded only
/// for a change (kind `set_device`) or a failure (kind `api_span` with the result).
///
/// # Safety
/// `call` calls the real function with the caller's arguments; `new_device` may call
/// into the runtime after a successful call.
unsafe fn set_device_common<S: Shim>(
    idx: H,
    fam: Family,
    api: Api,
    handle: u64,
    call: impl FnOnce(*mut c_void) -> c_int,
    new_device: impl FnOnce() -> i32,
) -> c_int {
    let real = resolve_guarded::<S>(idx as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    let rec: Option<Pending> = panic_guard::catch(|| record::begin::<S>(fam, api)).flatten();
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

/// The body of the `hipSetDevice` export (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
pub unsafe extern "C" fn hipSetDevice<S: Shim>(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common::<S>(
            H::hipSetDevice,
            Family::Hip,
            Api::HipSetDevice,
            dev as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(dev),
            || dev,
        )
    }
}

/// The body of the `cudaSetDevice` export (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the runtime's function.
pub unsafe extern "C" fn cudaSetDevice<S: Shim>(dev: c_int) -> c_int {
    type F = unsafe extern "C" fn(c_int) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common::<S>(
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
fn ctx_device<S: Shim>() -> i32 {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    let real = resolve::<S>(H::cuCtxSetCurrent as usize);
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

/// The body of the `cuCtxSetCurrent` export (see [`set_device_common`]).
///
/// # Safety
/// Same contract as the driver's function.
pub unsafe extern "C" fn cuCtxSetCurrent<S: Shim>(ctx: Ptr) -> c_int {
    type F = unsafe extern "C" fn(Ptr) -> c_int;
    // SAFETY: the real function has this signature; the caller's argument.
    unsafe {
        set_device_common::<S>(
            H::cuCtxSetCurrent,
            Family::CudaDriver,
            Api::CuCtxSetCurrent,
            ctx as u64,
            |f| core::mem::transmute::<*mut c_void, F>(f)(ctx),
            || if ctx.is_null() { -1 } else { ctx_device::<S>() },
        )
    }
}

/// The body of the `hipGetProcAddress` export: a hooked name's pointer is replaced by its wrapper
/// after a successful lookup ([`wrap_proc`]).
///
/// # Safety
/// Same contract as the runtime's function.
pub unsafe extern "C" fn hipGetProcAddress<S: Shim>(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded::<S>(H::hipGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc::<S>(Family::Hip, sym, pfn, ver, flags) });
    }
    r
}

/// The body of the `cuGetProcAddress` export (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
pub unsafe extern "C" fn cuGetProcAddress<S: Shim>(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64) -> c_int;
    let real = resolve_guarded::<S>(H::cuGetProcAddress as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc::<S>(Family::CudaDriver, sym, pfn, ver, flags) });
    }
    r
}

/// The body of the `cuGetProcAddress_v2` export (see [`hipGetProcAddress`]).
///
/// # Safety
/// Same contract as the driver's function.
pub unsafe extern "C" fn cuGetProcAddress_v2<S: Shim>(
    sym: *const c_char,
    pfn: PPtr,
    ver: c_int,
    flags: u64,
    status: Ptr,
) -> c_int {
    type F = unsafe extern "C" fn(*const c_char, PPtr, c_int, u64, Ptr) -> c_int;
    let real = resolve_guarded::<S>(H::cuGetProcAddress_v2 as usize);
    if real.is_null() {
        return NOT_INITIALIZED;
    }
    // SAFETY: the real function has this signature; the caller's arguments.
    let r = unsafe { core::mem::transmute::<*mut c_void, F>(real)(sym, pfn, ver, flags, status) };
    if r == 0 {
        // SAFETY: the caller's arguments, valid after the successful real call.
        panic_guard::catch(|| unsafe { wrap_proc::<S>(Family::CudaDriver, sym, pfn, ver, flags) });
    }
    r
}

/// Index of the hook whose exported name is exactly `name`.
pub fn lookup_exact(name: &[u8]) -> Option<usize> {
    match name.first() {
        Some(b'h') | Some(b'c') => {}
        _ => return None,
    }
    HOOKS.iter().position(|h| h.name().as_bytes() == name)
}

/// What to give the program for hook `h` when its library handed out `p`.
pub fn wrap_result<S: Shim>(h: &HookInfo, p: *mut c_void) -> *mut c_void {
    if p.is_null() {
        return p;
    }
    if p == S::wrapper(h.idx) {
        // Our own export came back (RTLD_DEFAULT or the global scope): without the shim
        // the lookup finds the runtime's function, or nothing when there is none. Checked
        // whether or not recording is on: "is CUDA here?" probes must get the answer
        // they get without the shim.
        return if resolve_index::<S>(h).is_null() {
            core::ptr::null_mut()
        } else {
            p
        };
    }
    if !state::wrap_allowed(h.family) {
        return p;
    }
    if h.offer_real(p) {
        S::wrapper(h.idx)
    } else {
        p
    }
}

fn resolve_index<S: Shim>(h: &HookInfo) -> *mut c_void {
    HOOKS
        .iter()
        .position(|x| core::ptr::eq(x, h))
        .map_or(core::ptr::null_mut(), resolve::<S>)
}

/// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
const PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// After a successful `*GetProcAddress(sym, pfn, version, flags)`: replaces `*pfn` with
/// our wrapper when `sym` names a hooked function. The variant (`_v2`, `_ptsz`, v1) is
/// identified from the returned address (`dladdr`), else from the version and flags
/// as the CUDA headers define them.
///
/// # Safety
/// `sym` NUL-terminated or NULL, `pfn` valid or NULL.
pub unsafe fn wrap_proc<S: Shim>(
    fam: Family,
    sym: *const c_char,
    pfn: *mut *mut c_void,
    ver: c_int,
    flags: u64,
) {
    // SAFETY: `sym` NUL-terminated or NULL, `pfn` valid or NULL (contract above), read and written only after the checks below.
    unsafe {
        if sym.is_null() || pfn.is_null() || (*pfn).is_null() || !state::wrap_allowed(fam) {
            return;
        }
        let saved_errno = *libc::__errno_location();
        let name = CStr::from_ptr(sym).to_bytes();
        let p = *pfn;
        let is_candidate = |h: &&HookInfo| h.family == fam && h.base.as_bytes() == name;
        if !HOOKS.iter().any(|h| is_candidate(&h)) {
            if crate::debug::enabled() && name.windows(3).any(|w| w == b"Mem") {
                crate::debug::lookup("getprocaddress", name, "not-hooked");
            }
            return;
        }
        let mut chosen: Option<&HookInfo> = None;
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p, &mut info) != 0 && info.dli_saddr == p && !info.dli_sname.is_null() {
            let exact = CStr::from_ptr(info.dli_sname).to_bytes();
            chosen = HOOKS
                .iter()
                .filter(is_candidate)
                .find(|h| h.name().as_bytes() == exact);
        }
        if chosen.is_none() {
            let want_ptsz = flags & PER_THREAD_DEFAULT_STREAM != 0;
            let ver = ver.max(0) as u32;
            let pick = |ptsz: bool| {
                HOOKS
                    .iter()
                    .filter(is_candidate)
                    .filter(|h| h.is_ptsz() == ptsz && h.min_ver <= ver.max(h.min_ver.min(1)))
                    .filter(|h| h.min_ver <= ver || ver == 0)
                    .max_by_key(|h| h.min_ver)
            };
            chosen = if want_ptsz {
                pick(true).or_else(|| pick(false))
            } else {
                pick(false)
            };
        }
        if let Some(h) = chosen {
            *pfn = wrap_result::<S>(h, p);
            let what = if *pfn == S::wrapper(h.idx) {
                h.name()
            } else {
                "real"
            };
            crate::debug::lookup("getprocaddress", name, what);
        }
        *libc::__errno_location() = saved_errno;
    }
}
