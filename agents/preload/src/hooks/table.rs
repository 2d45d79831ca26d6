//! The hook table: every hooked function's name, API family, wire `Api`, GetProcAddress
//! base name and minimum CUDA version ([`HOOKS`], built from `list`), and its real
//! function as far as known (the slots: filled by the first lookup, by `dlsym` /
//! GetProcAddress hooks and by `memwatch attach`; forgotten when its library is
//! unloaded).
//!
//! Below the wrappers and everything else: the delivery side (describing devices
//! through a runtime's own functions) reads the slots without reaching up into the
//! wrappers, whose addresses the parent module owns.

use crate::config::Family;
use core::ffi::c_void;
use core::sync::atomic::{AtomicPtr, Ordering};
use memwatch_wire::Api;

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
    /// Index in [`HOOKS`] (and the slots).
    pub(crate) idx: usize,
}

impl HookInfo {
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

macro_rules! table {
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
                api: Api::$api, family: Family::$fam, idx: H::$name as usize }, )*
            $( HookInfo { sym: concat!(stringify!($cname), "\0"), base: $cbase, min_ver: $cver,
                api: Api::$capi, family: Family::$cfam, idx: H::$cname as usize }, )*
        ];
    };
}

super::list::hook_list!(table);

/// The real function in hook `idx`'s slot (NULL when not known yet, or no such hook).
#[inline]
pub fn slot(idx: usize) -> *mut c_void {
    SLOTS
        .get(idx)
        .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire))
}
