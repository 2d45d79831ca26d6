//! The shim's exported symbols for the hooked runtime functions (the names a program
//! or runtime binds to): one per hook of `hooks::list`, each the body in `hooks`
//! instantiated with `lifecycle`'s start-up, and the address of each ([`HookInfo::wrapper`]).
//!
//! The composition root of the shim: the only module that names both the wrappers and
//! `lifecycle`, so that the hot path and the wrappers stay below lifecycle code, which
//! calls down into them. On x86-64 Linux each export of `hooks::list`'s `record` list is
//! an entry trampoline that saves the program's frame pointer, return address and stack
//! pointer in the thread block (unless a hooked call is already in progress on this
//! thread) and jumps to the body; `record::stack_sample` walks the program's stack from
//! there. Five instructions.

use crate::hooks::{self, HookInfo, Shim, H};
use crate::lifecycle::Lifecycle;
use crate::record::thread_state;
use core::ffi::{c_char, c_int, c_void};

#[derive(Clone, Copy)]
struct Wrapper(*const ());
// SAFETY: a function address, immutable.
unsafe impl Sync for Wrapper {}

impl Shim for Lifecycle {
    fn wrapper(idx: usize) -> *mut c_void {
        WRAPPERS
            .get(idx)
            .map_or(core::ptr::null_mut(), |w| w.0 as *mut c_void)
    }
}

impl HookInfo {
    /// The exported wrapper of this hook (what the program is given instead of the real
    /// function).
    pub fn wrapper(&self) -> *mut c_void {
        Lifecycle::wrapper(self.idx)
    }
}

type Ptr = *mut c_void;
type PPtr = *mut *mut c_void;

macro_rules! exports {
    (
        record { $( $fam:ident $api:ident $base:literal $ver:literal
            fn $name:ident($($a:ident: $t:ty),*) |$p:ident, $r:ident| $body:block )* }
        custom { $( $cfam:ident $capi:ident $cbase:literal $cver:literal fn $cname:ident; )* }
    ) => {
        /// The exported wrapper of each hook, in `HOOKS` order.
        static WRAPPERS: [Wrapper; H::COUNT as usize] = [
            $( Wrapper($name as *const ()), )*
            $( Wrapper($cname as *const ()), )*
        ];

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
                    inner = sym hooks::$name::<Lifecycle>,
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
                unsafe { hooks::$name::<Lifecycle>($($a),*) }
            }
        )*
    };
}

hooks::list::hook_list!(exports);

/// Interposes `hipSetDevice` (`hooks::hipSetDevice`).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn hipSetDevice(dev: c_int) -> c_int {
    // SAFETY: the caller's argument, under the runtime function's contract.
    unsafe { hooks::hipSetDevice::<Lifecycle>(dev) }
}

/// Interposes `cudaSetDevice` (`hooks::cudaSetDevice`).
///
/// # Safety
/// Same contract as the runtime's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cudaSetDevice(dev: c_int) -> c_int {
    // SAFETY: the caller's argument, under the runtime function's contract.
    unsafe { hooks::cudaSetDevice::<Lifecycle>(dev) }
}

/// Interposes `cuCtxSetCurrent` (`hooks::cuCtxSetCurrent`).
///
/// # Safety
/// Same contract as the driver's function.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: Ptr) -> c_int {
    // SAFETY: the caller's argument, under the driver function's contract.
    unsafe { hooks::cuCtxSetCurrent::<Lifecycle>(ctx) }
}

/// Interposes `hipGetProcAddress` (`hooks::hipGetProcAddress`).
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
    // SAFETY: the caller's arguments, under the runtime function's contract.
    unsafe { hooks::hipGetProcAddress::<Lifecycle>(sym, pfn, ver, flags, status) }
}

/// Interposes `cuGetProcAddress` (`hooks::cuGetProcAddress`).
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
    // SAFETY: the caller's arguments, under the driver function's contract.
    unsafe { hooks::cuGetProcAddress::<Lifecycle>(sym, pfn, ver, flags) }
}

/// Interposes `cuGetProcAddress_v2` (`hooks::cuGetProcAddress_v2`).
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
    // SAFETY: the caller's arguments, under the driver function's contract.
    unsafe { hooks::cuGetProcAddress_v2::<Lifecycle>(sym, pfn, ver, flags, status) }
}
