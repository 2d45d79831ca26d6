//! Fixed-size, allocation-free state shared by the PJRT wrappers and the flusher.
//!
//! Owns three tables: devices (PJRT_Device* -> local hardware id), executables
//! (PJRT_LoadedExecutable* -> name, fingerprint, compiled memory stats, device ids,
//! output count; filled on the compiling thread, turned into `pjrt_executable` frames by
//! the flusher) and completion contexts (what an execute's `PJRT_Event_OnReady` callback
//! needs). Slots are claimed with compare-and-swap; nothing here blocks or allocates.

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use memwatch_wire::CompiledMemoryStats;

// ---------------------------------------------------------------- devices

pub const MAX_DEVICES: usize = 64;
static DEV_PTR: [AtomicPtr<c_void>; MAX_DEVICES] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_DEVICES];
static DEV_ID: [AtomicI32; MAX_DEVICES] = [const { AtomicI32::new(-1) }; MAX_DEVICES];

/// The id recorded for `dev`, if registered.
pub fn device_id(dev: *mut c_void) -> Option<i32> {
    if dev.is_null() {
        return None;
    }
    for (p, id) in DEV_PTR.iter().zip(DEV_ID.iter()) {
        let cur = p.load(Ordering::Acquire);
        if cur.is_null() {
            return None;
        }
        if cur == dev {
            let v = id.load(Ordering::Acquire);
            return (v >= 0).then_some(v);
        }
    }
    None
}

/// Registers `dev` with hardware id `id` (first registration wins).
pub fn register_device(dev: *mut c_void, id: i32) {
    if dev.is_null() {
        return;
    }
    for (p, slot_id) in DEV_PTR.iter().zip(DEV_ID.iter()) {
        match p.compare_exchange(
            core::ptr::null_mut(),
            dev,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                slot_id.store(id, Ordering::Release);
                return;
            }
            Err(cur) if cur == dev => return,
            Err(_) => {}
        }
    }
}

/// Calls `f` for each registered device (pointer, id).
pub fn for_each_device(mut f: impl FnMut(*mut c_void, i32)) {
    for (p, id) in DEV_PTR.iter().zip(DEV_ID.iter()) {
        let cur = p.load(Ordering::Acquire);
        if cur.is_null() {
            return;
        }
        let v = id.load(Ordering::Acquire);
        if v >= 0 {
            f(cur, v);
        }
    }
}

/// Forgets every device (the client that owned them is being destroyed).
pub fn clear_devices() {
    for id in DEV_ID.iter() {
        id.store(-1, Ordering::Release);
    }
}

// ------------------------------------------------------------ executables

pub const MAX_EXECUTABLES: usize = 4096;
pub const NAME_BYTES: usize = 200;
pub const FP_BYTES: usize = 120;
pub const EXEC_DEVICES: usize = 16;

const EMPTY: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
const EMITTED: u8 = 3;

/// What the compiling thread learned about one loaded executable.
#[derive(Clone, Copy)]
pub struct ExecInfo {
    pub ts_raw: u64,
    pub flags: u32,
    pub stats: CompiledMemoryStats,
    pub num_outputs: u32,
    pub num_devices: u8,
    pub devices: [i32; EXEC_DEVICES],
    pub name_len: u8,
    pub name: [u8; NAME_BYTES],
    pub fp_len: u8,
    pub fp: [u8; FP_BYTES],
}

impl ExecInfo {
    pub const fn empty() -> Self {
        ExecInfo {
            ts_raw: 0,
            flags: 0,
            stats: CompiledMemoryStats {
                generated_code: 0,
                argument: 0,
                output: 0,
                alias: 0,
                temp: 0,
                host_generated_code: 0,
                host_argument: 0,
                host_output: 0,
                host_alias: 0,
                host_temp: 0,
            },
            num_outputs: 0,
            num_devices: 0,
            devices: [0; EXEC_DEVICES],
            name_len: 0,
            name: [0; NAME_BYTES],
            fp_len: 0,
            fp: [0; FP_BYTES],
        }
    }
    pub fn set_name(&mut self, b: &[u8]) {
        let n = b.len().min(NAME_BYTES);
        self.name[..n].copy_from_slice(&b[..n]);
        self.name_len = n as u8;
    }
    pub fn set_fingerprint(&mut self, b: &[u8]) {
        let n = b.len().min(FP_BYTES);
        self.fp[..n].copy_from_slice(&b[..n]);
        self.fp_len = n as u8;
    }
}

/// Output sizes cached per executable (outputs past this are asked of the plugin).
pub const OUT_SIZES: usize = 16;

struct ExecSlot {
    key: AtomicU64,
    state: AtomicU8,
    info: UnsafeCell<ExecInfo>,
    /// On-device size of output i (0: not known yet). An executable's output shapes are
    /// static, so the first execute's answer holds for all later ones.
    out_sizes: [AtomicU64; OUT_SIZES],
}
// SAFETY: `info` is written only by the holder of state BUSY.
unsafe impl Sync for ExecSlot {}

static EXECS: [ExecSlot; MAX_EXECUTABLES] = [const {
    ExecSlot {
        key: AtomicU64::new(0),
        state: AtomicU8::new(EMPTY),
        info: UnsafeCell::new(ExecInfo::empty()),
        out_sizes: [const { AtomicU64::new(0) }; OUT_SIZES],
    }
}; MAX_EXECUTABLES];

#[inline]
fn home(handle: u64) -> usize {
    (handle.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % MAX_EXECUTABLES
}

const PROBES: usize = 64;

fn find_slot(handle: u64) -> Option<&'static ExecSlot> {
    let h = home(handle);
    for i in 0..PROBES {
        let s = EXECS.get((h + i) % MAX_EXECUTABLES)?;
        let k = s.key.load(Ordering::Acquire);
        if k == handle {
            return Some(s);
        }
        if k == 0 {
            return None;
        }
    }
    None
}

/// Stores `info` for `handle` (overwrites on handle reuse). Returns false when full.
pub fn insert_exec(handle: u64, info: &ExecInfo) -> bool {
    if handle == 0 {
        return false;
    }
    let h = home(handle);
    for i in 0..PROBES {
        let Some(s) = EXECS.get((h + i) % MAX_EXECUTABLES) else {
            return false;
        };
        let claimed = match s
            .key
            .compare_exchange(0, handle, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(k) => k == handle,
        };
        if !claimed {
            continue;
        }
        // Take the slot (a reader may hold it for microseconds).
        for _ in 0..1_000_000 {
            let st = s.state.load(Ordering::Acquire);
            if st != BUSY
                && s.state
                    .compare_exchange(st, BUSY, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                // SAFETY: state BUSY held.
                unsafe { *s.info.get() = *info };
                for o in &s.out_sizes {
                    o.store(0, Ordering::Relaxed);
                }
                s.state.store(READY, Ordering::Release);
                return true;
            }
            core::hint::spin_loop();
        }
        return false;
    }
    false
}

/// Device id and output count of `handle` for execute (None: unknown executable).
#[inline]
pub fn exec_layout(handle: u64) -> Option<(u32, u8, [i32; EXEC_DEVICES])> {
    let s = find_slot(handle)?;
    let st = s.state.load(Ordering::Acquire);
    if st != READY && st != EMITTED {
        return None;
    }
    // SAFETY: READY/EMITTED slots are only rewritten on handle reuse after destroy;
    // the fields read are plain integers.
    let i = unsafe { &*s.info.get() };
    Some((i.num_outputs, i.num_devices, i.devices))
}

/// The cached on-device size of `handle`'s output `i` (None: not cached yet).
#[inline]
pub fn output_size(handle: u64, i: usize) -> Option<u64> {
    let v = find_slot(handle)?.out_sizes.get(i)?.load(Ordering::Relaxed);
    (v != 0).then_some(v)
}

/// Remembers the on-device size of `handle`'s output `i` (ignored past [`OUT_SIZES`]).
pub fn set_output_size(handle: u64, i: usize, size: u64) {
    if let Some(o) = find_slot(handle).and_then(|s| s.out_sizes.get(i)) {
        o.store(size, Ordering::Relaxed);
    }
}

/// Calls `f` for every executable not yet emitted, then marks it emitted. Returns how
/// many were visited.
pub fn drain_new_execs(mut f: impl FnMut(u64, &ExecInfo) -> bool) -> usize {
    let mut n = 0;
    for s in EXECS.iter() {
        if s.state.load(Ordering::Acquire) != READY {
            continue;
        }
        if s.state
            .compare_exchange(READY, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        // SAFETY: state BUSY held.
        let info = unsafe { &*s.info.get() };
        let ok = f(s.key.load(Ordering::Acquire), info);
        s.state
            .store(if ok { EMITTED } else { READY }, Ordering::Release);
        n += 1;
    }
    n
}

/// Forgets all executables (after fork: the child re-announces nothing it did not see).
pub fn mark_all_new() {
    for s in EXECS.iter() {
        let _ = s
            .state
            .compare_exchange(EMITTED, READY, Ordering::AcqRel, Ordering::Acquire);
    }
}

// ---------------------------------------------------- completion contexts

pub const MAX_PENDING: usize = 4096;

/// What the `OnReady` callback of one execute needs.
pub struct Completion {
    pub used: AtomicU8,
    pub handle: AtomicU64,
    pub start_raw: AtomicU64,
    pub device: AtomicI32,
}

pub static COMPLETIONS: [Completion; MAX_PENDING] = [const {
    Completion {
        used: AtomicU8::new(0),
        handle: AtomicU64::new(0),
        start_raw: AtomicU64::new(0),
        device: AtomicI32::new(0),
    }
}; MAX_PENDING];

static NEXT_COMPLETION: AtomicU64 = AtomicU64::new(0);

/// Claims a context; None when all are in flight.
pub fn claim_completion(handle: u64, start_raw: u64, device: i32) -> Option<usize> {
    let start = NEXT_COMPLETION.fetch_add(1, Ordering::Relaxed) as usize;
    for i in 0..32 {
        let idx = (start + i) % MAX_PENDING;
        let c = COMPLETIONS.get(idx)?;
        if c.used
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            c.handle.store(handle, Ordering::Relaxed);
            c.start_raw.store(start_raw, Ordering::Relaxed);
            c.device.store(device, Ordering::Relaxed);
            return Some(idx);
        }
    }
    None
}

/// Reads and frees a context.
pub fn take_completion(idx: usize) -> Option<(u64, u64, i32)> {
    let c = COMPLETIONS.get(idx)?;
    let v = (
        c.handle.load(Ordering::Relaxed),
        c.start_raw.load(Ordering::Relaxed),
        c.device.load(Ordering::Relaxed),
    );
    c.used.store(0, Ordering::Release);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_table_insert_lookup_drain() {
        let mut i = ExecInfo::empty();
        i.set_name(b"jit_f");
        i.num_outputs = 3;
        i.num_devices = 1;
        i.devices[0] = 2;
        assert!(insert_exec(0xabc0, &i));
        let (n, nd, d) = exec_layout(0xabc0).unwrap();
        assert_eq!((n, nd, d[0]), (3, 1, 2));
        assert!(exec_layout(0xdead0).is_none());
        let mut seen = 0;
        drain_new_execs(|h, info| {
            if h == 0xabc0 {
                assert_eq!(&info.name[..info.name_len as usize], b"jit_f");
                seen += 1;
            }
            true
        });
        assert_eq!(seen, 1);
        drain_new_execs(|h, _| {
            assert_ne!(h, 0xabc0);
            true
        });
    }

    #[test]
    fn devices_register_once() {
        let a = 0x1000 as *mut c_void;
        register_device(a, 5);
        register_device(a, 6);
        assert_eq!(device_id(a), Some(5));
        assert_eq!(device_id(0x2000 as *mut c_void), None);
    }

    #[test]
    fn completions_are_reused() {
        let i = claim_completion(1, 2, 3).unwrap();
        assert_eq!(take_completion(i), Some((1, 2, 3)));
    }
}
