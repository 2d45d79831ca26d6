//! Late attach: the entry points `memwatch attach` calls after loading the shim into a
//! running process with `dlopen`, and what they do.
//!
//! `memwatch_attach_start(sink)`: fixes the sink (`unix:PATH` / `file:PATH`, the same
//! syntax as `MEMWATCH_SINK`), finds the real definition of every hooked function among
//! the loaded objects, redirects the loaded objects' GOT entries for the hooked names and
//! for `dlsym` / `dlvsym` to the shim's wrappers (`got_patch`) and the copies of the
//! hooked functions' addresses in their static data (`pointer_scan`), turns recording on, and
//! writes markers: `memwatch-attach start`, then one `pre-attach-baseline` per device
//! whose used memory the runtime can report (HIP: `hipMemGetInfo` on every device, the
//! thread's device restored after; CUDA: `cuMemGetInfo_v2` inside each device's primary
//! context that is already active, so no context is created). Returns 0 started, 1
//! already capturing (attached, or started under `memwatch run`), -1 bad sink, -2 the
//! shim was configured by `MEMWATCH_SINK` at start-up, -3 recording could not start. A
//! sink fixed by an earlier attach (of this process, or of the parent it was forked
//! from) is replaced by the new one.
//!
//! `memwatch_attach_stop(reason)`: restores the GOT entries and copies, turns recording off, writes
//! a `memwatch-attach stop` marker, flushes and closes the stream without `process_end`
//! (the process goes on). Returns 0 stopped, 1 was not attached.
//!
//! What cannot be seen after a late attach (say so to users): allocations made before
//! attach (only the baseline totals are known), and calls through function pointers the
//! program copied earlier (`dlsym`, `*GetProcAddress`, `&hipMalloc`) and keeps on the heap
//! or the stack. New `dlsym` / `*GetProcAddress` lookups after attach are wrapped.

use crate::config::{Config, SinkKind};
use crate::got_patch::{self, Hook, Patch};
use crate::hooks::HOOKS;
use crate::pointer_scan::{self, Redirect, Target};
use crate::real::real_dlsym;
use crate::record::state;
use crate::sink;
use core::ffi::{c_char, c_int, c_void, CStr};
use memwatch_wire::{Marker, Record};
use std::sync::Mutex;

/// How long the entry points wait for the sink lock.
const LOCK_NS: u64 = 2_000_000_000;

struct Attached {
    /// The process that was attached: a child forked meanwhile inherits this state (and
    /// the patched GOT entries) with its parent's pid in it.
    pid: u32,
    patches: Vec<Patch>,
    /// Copies of the real functions' addresses in static data, now the wrappers'.
    copies: Vec<Redirect>,
    names: Vec<(Vec<u8>, usize)>,
}

static STATE: Mutex<Option<Attached>> = Mutex::new(None);

fn shim_base() -> usize {
    // SAFETY: dladdr on our own function.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(memwatch_attach_start as *const c_void, &mut info) != 0 {
            return info.dli_fbase as usize;
        }
    }
    0
}

fn object_base(p: *mut c_void) -> usize {
    // SAFETY: dladdr accepts any address.
    unsafe {
        let mut info: libc::Dl_info = core::mem::zeroed();
        if libc::dladdr(p, &mut info) != 0 {
            return info.dli_fbase as usize;
        }
    }
    0
}

/// Names of the loaded objects (the main program as NULL).
fn loaded_objects() -> Vec<Option<std::ffi::CString>> {
    /// # Safety
    /// Called by `dl_iterate_phdr` with its header and our list.
    unsafe extern "C" fn cb(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader's header (its name NULL or NUL-terminated) and our list; a
        // panic is caught (it must not unwind into the C library).
        crate::panic_guard::catch(|| unsafe {
            let out = &mut *(data as *mut Vec<Option<std::ffi::CString>>);
            let info = &*info;
            if info.dlpi_name.is_null() || *info.dlpi_name == 0 {
                if out.is_empty() {
                    out.push(None);
                }
            } else {
                out.push(Some(CStr::from_ptr(info.dlpi_name).to_owned()));
            }
        });
        0
    }
    let mut out: Vec<Option<std::ffi::CString>> = Vec::new();
    // SAFETY: the callback only reads the header it is given.
    unsafe { libc::dl_iterate_phdr(Some(cb), &mut out as *mut _ as *mut c_void) };
    out
}

/// The definition of `name` outside the shim, searching every loaded object (also those
/// opened with RTLD_LOCAL, as XLA opens libcuda / libamdhip64).
fn definition_outside_shim(name: &CStr, shim: usize) -> *mut c_void {
    for obj in loaded_objects() {
        // SAFETY: RTLD_NOLOAD only returns handles of objects already loaded.
        let handle = unsafe {
            match &obj {
                None => libc::dlopen(core::ptr::null(), libc::RTLD_LAZY | libc::RTLD_NOLOAD),
                Some(n) => libc::dlopen(n.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD),
            }
        };
        if handle.is_null() {
            continue;
        }
        // SAFETY: valid handle and NUL-terminated name.
        let p = unsafe { real_dlsym()(handle, name.as_ptr()) };
        // SAFETY: handle from dlopen above.
        unsafe { crate::real::real_dlclose()(handle) };
        if !p.is_null() && object_base(p) != shim {
            return p;
        }
    }
    core::ptr::null_mut()
}

/// Fills the real-function slots of every hook whose function some loaded object
/// defines; returns the (name, wrapper) pairs to patch in GOTs and the (real, wrapper)
/// pairs whose copies in static data are redirected (not `dlsym` / `dlvsym`: only the
/// GPU runtimes' functions).
fn resolve_all(shim: usize) -> (Vec<(Vec<u8>, usize)>, Vec<Target>) {
    let mut names = Vec::new();
    let mut targets = Vec::new();
    for h in HOOKS.iter() {
        let Ok(cname) = CStr::from_bytes_with_nul(h.sym.as_bytes()) else {
            continue;
        };
        if h.real().is_null() {
            let p = definition_outside_shim(cname, shim);
            if !p.is_null() {
                h.offer_real(p);
            }
        }
        // The wrapper must be the shim's own definition (see build.rs).
        if !h.real().is_null() && object_base(h.wrapper()) == shim {
            names.push((h.name().as_bytes().to_vec(), h.wrapper() as usize));
            targets.push(Target {
                real: h.real() as usize,
                wrapper: h.wrapper() as usize,
            });
        }
    }
    // dlsym / dlvsym: the shim's exported trampolines, so lookups after attach are wrapped.
    for n in [c"dlsym", c"dlvsym"] {
        // SAFETY: our own object's handle; NUL-terminated names.
        unsafe {
            let mut info: libc::Dl_info = core::mem::zeroed();
            if libc::dladdr(memwatch_attach_start as *const c_void, &mut info) == 0 {
                continue;
            }
            let me = libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            if me.is_null() {
                continue;
            }
            let p = real_dlsym()(me, n.as_ptr());
            crate::real::real_dlclose()(me);
            if !p.is_null() && object_base(p) == shim {
                names.push((n.to_bytes().to_vec(), p as usize));
            }
        }
    }
    (names, targets)
}

/// The distinct object names, sorted, comma-separated (the main program's empty name
/// shown as `(main program)`), for the attach markers.
fn object_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let set: std::collections::BTreeSet<&str> = names.collect();
    set.iter()
        .map(|o| if o.is_empty() { "(main program)" } else { o })
        .collect::<Vec<_>>()
        .join(",")
}

fn marker(text: String, device: i32) -> Record {
    Record::Marker(Marker {
        pid: std::process::id(),
        // SAFETY: plain syscall.
        tid: unsafe { libc::syscall(libc::SYS_gettid) } as u32,
        ts_ns: crate::clock::monotonic_ns(),
        device,
        text,
    })
}

type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
type IntIn = unsafe extern "C" fn(c_int) -> c_int;
type MemInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type CtxState = unsafe extern "C" fn(c_int, *mut u32, *mut c_int) -> c_int;
type CtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type CtxPush = unsafe extern "C" fn(*mut c_void) -> c_int;
type CtxPop = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type DevGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;

fn func<T: Copy>(name: &CStr, shim: usize) -> Option<T> {
    let p = definition_outside_shim(name, shim);
    if p.is_null() {
        return None;
    }
    // SAFETY: T is a function pointer type matching the C declaration of `name`.
    Some(unsafe { core::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// Used device memory at attach time, one marker per device the runtimes report on.
fn baseline(shim: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let text = |api: &str, d: i32, free: usize, total: usize| {
        format!(
            "pre-attach-baseline device={d} used={} total={total} free={free} source={api}",
            total.saturating_sub(free)
        )
    };
    // HIP: every device, the calling thread's device restored afterwards.
    if let (Some(count), Some(get), Some(set), Some(info)) = (
        func::<IntOut>(c"hipGetDeviceCount", shim),
        func::<IntOut>(c"hipGetDevice", shim),
        func::<IntIn>(c"hipSetDevice", shim),
        func::<MemInfo>(c"hipMemGetInfo", shim),
    ) {
        let (mut n, mut orig) = (0, 0);
        // SAFETY: the runtime's own functions with valid out-pointers.
        unsafe {
            if count(&mut n) == 0 && get(&mut orig) == 0 {
                for d in 0..n.min(64) {
                    let (mut free, mut total) = (0usize, 0usize);
                    if set(d) == 0 && info(&mut free, &mut total) == 0 {
                        out.push(marker(text("hipMemGetInfo", d, free, total), d));
                    }
                }
                set(orig);
            }
        }
    }
    // CUDA driver: only devices whose primary context is already active.
    if let (
        Some(count),
        Some(dev_get),
        Some(state),
        Some(retain),
        Some(push),
        Some(pop),
        Some(info),
    ) = (
        func::<IntOut>(c"cuDeviceGetCount", shim),
        func::<DevGet>(c"cuDeviceGet", shim),
        func::<CtxState>(c"cuDevicePrimaryCtxGetState", shim),
        func::<CtxRetain>(c"cuDevicePrimaryCtxRetain", shim),
        func::<CtxPush>(c"cuCtxPushCurrent_v2", shim),
        func::<CtxPop>(c"cuCtxPopCurrent_v2", shim),
        func::<MemInfo>(c"cuMemGetInfo_v2", shim),
    ) {
        let release = func::<IntIn>(c"cuDevicePrimaryCtxRelease_v2", shim);
        let mut n = 0;
        // SAFETY: the driver's own functions with valid out-pointers.
        unsafe {
            if count(&mut n) == 0 {
                for ord in 0..n.min(64) {
                    let (mut dev, mut flags, mut active) = (0, 0u32, 0);
                    if dev_get(&mut dev, ord) != 0
                        || state(dev, &mut flags, &mut active) != 0
                        || active == 0
                    {
                        continue;
                    }
                    let mut ctx = core::ptr::null_mut();
                    if retain(&mut ctx, dev) != 0 {
                        continue;
                    }
                    if push(ctx) == 0 {
                        let (mut free, mut total) = (0usize, 0usize);
                        if info(&mut free, &mut total) == 0 {
                            out.push(marker(text("cuMemGetInfo_v2", ord, free, total), ord));
                        }
                        let mut popped = core::ptr::null_mut();
                        pop(&mut popped);
                    }
                    if let Some(rel) = release {
                        rel(dev);
                    }
                }
            }
        }
    }
    out
}

/// Starts capturing in a process the shim was just loaded into. See the module docs.
/// A panic in here is caught and answered -3 (the process goes on).
///
/// # Safety
/// `sink` must be NULL or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn memwatch_attach_start(sink_arg: *const c_char) -> c_int {
    // SAFETY: the caller's string (contract above).
    crate::panic_guard::catch(|| unsafe { attach_start(sink_arg) }).unwrap_or(-3)
}

/// [`memwatch_attach_start`]'s work.
///
/// # Safety
/// As for [`memwatch_attach_start`].
unsafe fn attach_start(sink_arg: *const c_char) -> c_int {
    // SAFETY: the caller's NUL-terminated string (contract above); plain libc calls; GOT and static-data words written through `got_patch` and `pointer_scan`, which check their mappings.
    unsafe {
        if sink_arg.is_null() {
            return -1;
        }
        let Ok(mut guard) = STATE.lock() else {
            return -3;
        };
        // SAFETY: plain syscall.
        let me = libc::getpid() as u32;
        let inherited = match guard.as_ref() {
            Some(a) if a.pid == me => return 1,
            Some(_) => true, // forked from an attached parent: its patches are ours too
            None => false,
        };
        let env_sink = libc::getenv(c"MEMWATCH_SINK".as_ptr());
        if state::is_active() && !env_sink.is_null() {
            return 1; // started under `memwatch run` / MEMWATCH_SINK
        }
        let sink_bytes = CStr::from_ptr(sink_arg).to_bytes();
        let cfg = Config::parse(Some(sink_bytes), None, None);
        if cfg.sink == SinkKind::None {
            return -1;
        }
        if !crate::lifecycle::set_config(cfg) {
            let cur = crate::config::get();
            if cur.sink != cfg.sink || cur.path_bytes() != cfg.path_bytes() {
                if !env_sink.is_null() {
                    return -2; // configured by MEMWATCH_SINK at start-up
                }
                // Configured by an earlier attach (of this process, or of the parent it was
                // forked from): this attach's sink replaces it.
                if !sink::retarget(cfg.sink, cfg.path_bytes(), LOCK_NS) {
                    return -3;
                }
            }
        }
        if inherited {
            if !crate::lifecycle::activate() {
                return -3;
            }
            if let Some(a) = guard.as_mut() {
                a.pid = me;
                let text = format!(
                    "memwatch-attach start patched_slots={} objects=(inherited from the parent) \
                     failed_slots=0 hooked_names={} copied_pointers={}",
                    a.patches.len(),
                    a.names.len(),
                    a.copies.len()
                );
                sink::emit_record(&marker(text, -1), LOCK_NS);
            }
            for rec in baseline(shim_base()) {
                sink::emit_record(&rec, LOCK_NS);
            }
            return 0;
        }
        let shim = shim_base();
        let (names, targets) = resolve_all(shim);
        if !crate::lifecycle::activate() {
            return -3;
        }
        let hooks: Vec<Hook> = names
            .iter()
            .map(|(n, w)| Hook {
                name: n,
                wrapper: *w,
            })
            .collect();
        let (patches, failures) = got_patch::patch_loaded(&hooks, shim);
        let scan_started = std::time::Instant::now();
        let scanned = pointer_scan::redirect_copies(&targets, shim);
        let scan_ms = scan_started.elapsed().as_secs_f64() * 1e3;
        let copies = scanned.redirects;
        let pjrt = crate::pjrt::attach_live(definition_outside_shim(c"GetPjrtApi", shim));
        let text = format!(
            "memwatch-attach start patched_slots={} objects={} failed_slots={} hooked_names={} \
             copied_pointers={} copied_in={} failed_copies={} scanned_mib={:.1} scan_ms={:.1} \
             {pjrt}",
            patches.len(),
            object_list(patches.iter().map(|p| p.object.as_str())),
            failures,
            names.len(),
            copies.len(),
            object_list(copies.iter().map(|c| c.object.as_str())),
            scanned.failures,
            scanned.bytes as f64 / (1 << 20) as f64,
            scan_ms
        );
        sink::emit_record(&marker(text, -1), LOCK_NS);
        for rec in baseline(shim) {
            sink::emit_record(&rec, LOCK_NS);
        }
        *guard = Some(Attached {
            pid: me,
            patches,
            copies,
            names,
        });
        0
    }
}

/// Stops capturing and restores the GOT entries. See the module docs. A panic in here
/// is caught and answered -3.
///
/// # Safety
/// `reason` must be NULL or a NUL-terminated string.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn memwatch_attach_stop(reason: *const c_char) -> c_int {
    // SAFETY: the caller's string (contract above).
    crate::panic_guard::catch(|| unsafe { attach_stop(reason) }).unwrap_or(-3)
}

/// [`memwatch_attach_stop`]'s work.
///
/// # Safety
/// As for [`memwatch_attach_stop`].
unsafe fn attach_stop(reason: *const c_char) -> c_int {
    // SAFETY: the caller's string or NULL (contract above); the patches were made by `attach_start` in objects still loaded.
    unsafe {
        let Ok(mut guard) = STATE.lock() else {
            return -3;
        };
        let Some(att) = guard.take() else {
            return 1;
        };
        let hooks: Vec<Hook> = att
            .names
            .iter()
            .map(|(n, w)| Hook {
                name: n,
                wrapper: *w,
            })
            .collect();
        let restored = got_patch::unpatch(&att.patches, &hooks);
        let pjrt = crate::pjrt::detach_live();
        let restored_copies = pointer_scan::restore(&att.copies);
        let why = if reason.is_null() {
            String::new()
        } else {
            CStr::from_ptr(reason).to_string_lossy().into_owned()
        };
        state::turn_off();
        let text = format!(
            "memwatch-attach stop restored_slots={restored} restored_copies={restored_copies} \
             {pjrt} reason={why}"
        );
        sink::emit_record(&marker(text, -1), LOCK_NS);
        sink::close_stream(LOCK_NS);
        0
    }
}
