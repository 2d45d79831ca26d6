//! The `GetPjrtApi` interposition: the copied function table.
//!
//! Owns finding the plugin's real `GetPjrtApi` (handed to us by the `dlsym` hook), making
//! one copy of the `PJRT_Api` table the plugin returns, and replacing a few entries in
//! the copy with the wrappers of `wrap`. Only entries that lie inside the plugin's own
//! `struct_size` and are non-null are replaced; slots past [`abi::LATE_SLOT`] only for
//! API minor >= [`abi::MIN_MINOR_LATE_SLOTS`]; any major version other than 0, a table
//! larger than our copy buffer or smaller than the header passes through untouched.
//! Everything past the last slot we know is copied byte for byte, so newer plugins keep
//! every entry. The real table stays the one we call through (its entries are saved in
//! `plugin`). Also owns the wrapped plugin's API version ([`version`]).

use super::abi::{self, slot, ApiHead};
use super::plugin::{CALL, REAL};
use super::{switches, wrap};
use core::ffi::c_void;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};

type GetApiFn = unsafe extern "C" fn() -> *const c_void;

/// The plugin's real `GetPjrtApi`.
static REAL_GET: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
/// The plugin's real table (after the first call).
static REAL_API: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

static MAJOR: AtomicI32 = AtomicI32::new(-1);
static MINOR: AtomicI32 = AtomicI32::new(-1);
static API_SIZE: AtomicU64 = AtomicU64::new(0);

fn set_version(major: i32, minor: i32, size: usize) {
    MAJOR.store(major, Ordering::Relaxed);
    MINOR.store(minor, Ordering::Relaxed);
    API_SIZE.store(size as u64, Ordering::Relaxed);
}

/// (major, minor, struct_size) of the wrapped plugin, when one was wrapped.
pub fn version() -> Option<(i32, i32, u64)> {
    let m = MAJOR.load(Ordering::Relaxed);
    (m >= 0).then(|| {
        (
            m,
            MINOR.load(Ordering::Relaxed),
            API_SIZE.load(Ordering::Relaxed),
        )
    })
}

/// Bytes of table we can hold (512 entries; today's header has ~130).
const COPY_BYTES: usize = 4096;

#[repr(C, align(64))]
struct Copy(core::cell::UnsafeCell<[u8; COPY_BYTES]>);
// SAFETY: written once by the thread that wins BUILD, read-only afterwards.
unsafe impl Sync for Copy {}
static COPY: Copy = Copy(core::cell::UnsafeCell::new([0; COPY_BYTES]));

const NONE: u8 = 0;
const BUILDING: u8 = 1;
const WRAPPED: u8 = 2;
const PASSTHROUGH: u8 = 3;
/// The plugin's own table wrapped in place by a late attach ([`wrap_live`]).
const IN_PLACE: u8 = 4;
static BUILD: AtomicU8 = AtomicU8::new(NONE);

/// The entries we replace and their wrappers.
const WRAPPED_SLOTS: &[(usize, abi::ApiFn)] = &[
    (slot::EVENT_DESTROY, wrap::event_destroy),
    (slot::EVENT_ERROR, wrap::event_error),
    (slot::EVENT_AWAIT, wrap::event_await),
    (slot::EVENT_ON_READY, wrap::event_on_ready),
    (slot::CLIENT_DESTROY, wrap::client_destroy),
    (
        slot::CLIENT_ADDRESSABLE_DEVICES,
        wrap::client_addressable_devices,
    ),
    (slot::CLIENT_COMPILE, wrap::client_compile),
    (slot::CLIENT_BUFFER_FROM_HOST_BUFFER, wrap::buffer_from_host),
    (slot::LOADED_EXECUTABLE_DESTROY, wrap::loaded_destroy),
    (slot::LOADED_EXECUTABLE_EXECUTE, wrap::execute),
    (
        slot::EXECUTABLE_DESERIALIZE_AND_LOAD,
        wrap::deserialize_and_load,
    ),
    (slot::BUFFER_DESTROY, wrap::buffer_destroy),
    (slot::BUFFER_DELETE, wrap::buffer_delete),
    (slot::BUFFER_COPY_TO_DEVICE, wrap::buffer_copy_to_device),
    (slot::BUFFER_COPY_TO_MEMORY, wrap::buffer_copy_to_memory),
    (slot::BUFFER_READY_EVENT, wrap::buffer_ready_event),
];

/// Called by the `dlsym` hook when the program looked up `GetPjrtApi` and got `p`.
/// Returns what the program should get.
pub fn on_lookup(p: *mut c_void) -> *mut c_void {
    if p.is_null() || !switches::enabled() || BUILD.load(Ordering::Acquire) == IN_PLACE {
        // (In place: the plugin's own table, which its GetPjrtApi returns, is wrapped.)
        return p;
    }
    match REAL_GET.compare_exchange(
        core::ptr::null_mut(),
        p,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => get_pjrt_api_wrapper as *mut c_void,
        Err(cur) if cur == p => get_pjrt_api_wrapper as *mut c_void,
        // A second, different plugin: left alone (one plugin per process is recorded).
        Err(_) => p,
    }
}

/// `GetPjrtApi` as the program sees it: the plugin's table, or the shim's copy of it
/// once built. A panic while building is caught and leaves the plugin's table in use.
///
/// # Safety
/// Called as the plugin's `GetPjrtApi` (no arguments).
unsafe extern "C" fn get_pjrt_api_wrapper() -> *const c_void {
    let real_get = REAL_GET.load(Ordering::Acquire);
    if real_get.is_null() {
        return core::ptr::null();
    }
    // SAFETY: the plugin's own `GetPjrtApi`, handed to us by the dlsym hook.
    let api = unsafe { core::mem::transmute::<*mut c_void, GetApiFn>(real_get)() };
    if api.is_null() {
        return api;
    }
    // SAFETY: `api` is the plugin's table, which lives as long as the plugin.
    crate::panic_guard::catch(|| unsafe { table_for(api) }).unwrap_or(api)
}

/// The table to hand out for the plugin's `api`: the copy once built (by this call or an
/// earlier one), `api` itself when it cannot be wrapped or another thread's build takes
/// too long.
///
/// # Safety
/// `api` is the plugin's live `PJRT_Api`.
unsafe fn table_for(api: *const c_void) -> *const c_void {
    match BUILD.compare_exchange(NONE, BUILDING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            // SAFETY: the plugin's table (contract above). A panic inside leaves
            // PASSTHROUGH, so no caller waits for a build that ended.
            let ok = crate::panic_guard::catch(|| unsafe { build(api) }).unwrap_or(false);
            BUILD.store(if ok { WRAPPED } else { PASSTHROUGH }, Ordering::Release);
        }
        Err(_) => {
            // Another thread builds (microseconds): wait for it, bounded in time; past
            // the bound this caller gets the runtime's own table (unrecorded, unchanged).
            crate::wait::wait_until(
                || BUILD.load(Ordering::Acquire) != BUILDING,
                crate::wait::SET_UP_MAX_NS,
            );
        }
    }
    if BUILD.load(Ordering::Acquire) == WRAPPED
        && core::ptr::eq(REAL_API.load(Ordering::Acquire), api)
    {
        COPY.0.get() as *const c_void
    } else {
        api
    }
}

/// Copies the table and installs the wrappers. Returns false to pass through.
///
/// # Safety
/// `api` is the plugin's live `PJRT_Api`, at least as large as its `struct_size` says.
unsafe fn build(api: *const c_void) -> bool {
    // SAFETY: every `PJRT_Api` starts with this head.
    let head = unsafe { &*(api as *const ApiHead) };
    let size = head.struct_size;
    if !(abi::slot_offset(1)..=COPY_BYTES).contains(&size) || head.major != 0 {
        return false;
    }
    let minor = head.minor;
    let in_table = |s: usize| {
        abi::slot_offset(s) + 8 <= size
            && (s < abi::LATE_SLOT || minor >= abi::MIN_MINOR_LATE_SLOTS)
    };
    let dst = COPY.0.get() as *mut u8;
    // SAFETY: `size` bytes of the plugin's table (contract above) into our buffer of
    // COPY_BYTES >= size, written only here, by the one thread that won BUILD; slots
    // read and written lie inside `size` (`in_table`).
    unsafe {
        core::ptr::copy_nonoverlapping(api as *const u8, dst, size);
        for (s, cell) in CALL.iter().enumerate() {
            if in_table(s) {
                let p = *(api as *const u8)
                    .add(abi::slot_offset(s))
                    .cast::<*mut c_void>();
                cell.store(p, Ordering::Relaxed);
            }
        }
        for (s, w) in WRAPPED_SLOTS {
            if !in_table(*s) {
                continue;
            }
            let Some(p) = CALL.get(*s).map(|c| c.load(Ordering::Relaxed)) else {
                continue;
            };
            if p.is_null() {
                continue;
            }
            if let Some(r) = REAL.get(*s) {
                r.store(p, Ordering::Relaxed);
            }
            *dst.add(abi::slot_offset(*s)).cast::<*const ()>() = *w as *const ();
        }
    }
    REAL_API.store(api as *mut c_void, Ordering::Release);
    set_version(head.major, minor, size);
    true
}

/// One entry of the plugin's live table redirected by [`wrap_live`].
struct LivePatch {
    /// Address of the slot in the plugin's table.
    slot: usize,
    /// The plugin's entry.
    original: usize,
    /// Our wrapper.
    wrapper: usize,
}

/// The slots [`wrap_live`] redirected (restored by [`unwrap_live`]).
static LIVE_PATCHES: std::sync::Mutex<Vec<LivePatch>> = std::sync::Mutex::new(Vec::new());

/// Late attach (`memwatch attach`): the framework got its `PJRT_Api` long ago and calls
/// through it, so instead of handing out a copy, the entries of the plugin's own table
/// are redirected to the wrappers (the table is data inside the plugin; a read-only
/// page is made writable for each store and given its protection back). `get` is the
/// plugin's `GetPjrtApi`, which returns that table. The same checks as for a copy
/// decide which slots are wrapped. Returns the number of slots redirected, or why
/// nothing was: PJRT off, a table of another major version or size, or a table the
/// shim already wraps.
///
/// # Safety
/// `get` is a loaded plugin's `GetPjrtApi`.
pub unsafe fn wrap_live(get: *mut c_void) -> Result<usize, &'static str> {
    if get.is_null() {
        return Err("no GetPjrtApi");
    }
    if !switches::enabled() {
        return Err("PJRT recording is off");
    }
    if BUILD
        .compare_exchange(NONE, BUILDING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Err("already wrapped");
    }
    // SAFETY: the plugin's own `GetPjrtApi` (contract above).
    let api = unsafe { core::mem::transmute::<*mut c_void, GetApiFn>(get)() };
    // SAFETY: the plugin's live table.
    let done = unsafe { patch_live(api) };
    BUILD.store(
        if done.as_ref().is_ok_and(|n| *n > 0) {
            IN_PLACE
        } else {
            NONE
        },
        Ordering::Release,
    );
    done
}

/// [`wrap_live`]'s work on the plugin's table `api`.
///
/// # Safety
/// `api` is NULL or the plugin's live `PJRT_Api`.
unsafe fn patch_live(api: *const c_void) -> Result<usize, &'static str> {
    if api.is_null() {
        return Err("GetPjrtApi returned NULL");
    }
    // SAFETY: every `PJRT_Api` starts with this head.
    let head = unsafe { &*(api as *const ApiHead) };
    let size = head.struct_size;
    if !(abi::slot_offset(1)..=COPY_BYTES).contains(&size) || head.major != 0 {
        return Err("unsupported PJRT_Api version or size");
    }
    let minor = head.minor;
    let in_table = |s: usize| {
        abi::slot_offset(s) + 8 <= size
            && (s < abi::LATE_SLOT || minor >= abi::MIN_MINOR_LATE_SLOTS)
    };
    let maps = crate::got_patch::mappings();
    let mut patches = Vec::new();
    for (s, cell) in CALL.iter().enumerate() {
        if in_table(s) {
            // SAFETY: a slot inside the table's `struct_size`.
            let p = unsafe {
                *(api as *const u8)
                    .add(abi::slot_offset(s))
                    .cast::<*mut c_void>()
            };
            cell.store(p, Ordering::Relaxed);
        }
    }
    for (s, w) in WRAPPED_SLOTS {
        let Some(p) = CALL.get(*s).map(|c| c.load(Ordering::Relaxed)) else {
            continue;
        };
        if !in_table(*s) || p.is_null() {
            continue;
        }
        if let Some(r) = REAL.get(*s) {
            r.store(p, Ordering::Relaxed);
        }
        let slot = api as usize + abi::slot_offset(*s);
        let (original, wrapper) = (p as usize, *w as usize);
        let Some(m) = crate::got_patch::mapping_of(&maps, slot) else {
            continue;
        };
        // SAFETY: an aligned word of the plugin's table in a mapping of this process;
        // swapped only while it still holds the plugin's entry.
        let swapped = unsafe {
            crate::got_patch::with_writable_word(slot, m.prot, |word| {
                word.compare_exchange(original, wrapper, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
        };
        if swapped {
            patches.push(LivePatch {
                slot,
                original,
                wrapper,
            });
        }
    }
    REAL_API.store(api as *mut c_void, Ordering::Release);
    set_version(head.major, minor, size);
    let n = patches.len();
    if let Ok(mut live) = LIVE_PATCHES.lock() {
        *live = patches;
    }
    Ok(n)
}

/// Detach: puts the plugin's entries back where a slot still holds our wrapper (a
/// slot changed meanwhile is left alone). Returns how many were restored. Calls already
/// inside a wrapper finish normally (the real entries stay known).
pub fn unwrap_live() -> usize {
    if BUILD.load(Ordering::Acquire) != IN_PLACE {
        return 0;
    }
    let patches = LIVE_PATCHES
        .lock()
        .map(|mut p| std::mem::take(&mut *p))
        .unwrap_or_default();
    let maps = crate::got_patch::mappings();
    let mut n = 0;
    for p in &patches {
        let Some(m) = crate::got_patch::mapping_of(&maps, p.slot) else {
            continue;
        };
        // SAFETY: the slot `wrap_live` wrote, in the still-loaded plugin's table.
        let back = unsafe {
            crate::got_patch::with_writable_word(p.slot, m.prot, |word| {
                word.compare_exchange(p.wrapper, p.original, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })
        };
        n += usize::from(back);
    }
    BUILD.store(NONE, Ordering::Release);
    n
}
