//! Execute errors that surface only later, on the output buffers' ready events.
//!
//! JAX often dispatches an execute without asking for completion events; a device-side
//! failure (e.g. the temp allocation of an asynchronously dispatched execute running out
//! of memory) is then only seen when the program waits for an output:
//! `PJRT_Buffer_ReadyEvent` on the output, then `PJRT_Event_OnReady` (JAX's futures),
//! `PJRT_Event_Await` or `PJRT_Event_Error` on that event. This module owns the
//! lock-free tables that link an output buffer, and then its ready event, to the
//! execution (executable handle, start, device) that produced it, the contexts of the
//! `OnReady` callbacks the shim interposes, and the "already reported" ring that makes one
//! failed execution one incident per device, however many of its outputs are awaited and
//! whether its completion event reported it too. Fixed-size static tables, no allocation;
//! when a table is full the link is not made (nothing is recorded, nothing breaks).

use core::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// (executable handle, execute start in raw clock units, device).
pub type Origin = (u64, u64, i32);

const SLOTS: usize = 8192;
const PROBE: usize = 16;
/// Key of a slot being written or cleared.
const BUSY: u64 = u64::MAX;

struct Link {
    key: AtomicU64,
    handle: AtomicU64,
    start: AtomicU64,
    device: AtomicI32,
}

static BUFFERS: [Link; SLOTS] = [const { Link::EMPTY }; SLOTS];
static EVENTS: [Link; SLOTS] = [const { Link::EMPTY }; SLOTS];

impl Link {
    #[allow(clippy::declare_interior_mutable_const)] // only used to initialise the statics
    const EMPTY: Link = Link {
        key: AtomicU64::new(0),
        handle: AtomicU64::new(0),
        start: AtomicU64::new(0),
        device: AtomicI32::new(0),
    };
}

fn home(key: u64) -> usize {
    ((key >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as usize % SLOTS
}

fn link(table: &[Link; SLOTS], key: u64, o: Origin) -> bool {
    if key == 0 || key == BUSY {
        return false;
    }
    let h = home(key);
    for i in 0..PROBE {
        let s = &table[(h + i) % SLOTS];
        if s.key
            .compare_exchange(0, BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            s.handle.store(o.0, Ordering::Relaxed);
            s.start.store(o.1, Ordering::Relaxed);
            s.device.store(o.2, Ordering::Relaxed);
            s.key.store(key, Ordering::Release);
            return true;
        }
    }
    false
}

fn find(table: &[Link; SLOTS], key: u64) -> Option<Origin> {
    if key == 0 || key == BUSY {
        return None;
    }
    let h = home(key);
    (0..PROBE).find_map(|i| {
        let s = &table[(h + i) % SLOTS];
        (s.key.load(Ordering::Acquire) == key).then(|| {
            (
                s.handle.load(Ordering::Relaxed),
                s.start.load(Ordering::Relaxed),
                s.device.load(Ordering::Relaxed),
            )
        })
    })
}

fn unlink(table: &[Link; SLOTS], key: u64) {
    if key == 0 || key == BUSY {
        return;
    }
    let h = home(key);
    for i in 0..PROBE {
        let s = &table[(h + i) % SLOTS];
        if s.key
            .compare_exchange(key, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
}

/// An output buffer of an execution.
pub fn link_output(buffer: u64, o: Origin) -> bool {
    link(&BUFFERS, buffer, o)
}
/// The buffer is gone (destroyed or deleted).
pub fn unlink_output(buffer: u64) {
    unlink(&BUFFERS, buffer)
}
/// The execution that produced `buffer`, if it is linked.
pub fn output_origin(buffer: u64) -> Option<Origin> {
    find(&BUFFERS, buffer)
}
/// A ready event of a linked output buffer.
pub fn link_event(event: u64, o: Origin) -> bool {
    link(&EVENTS, event, o)
}
/// The event is destroyed.
pub fn unlink_event(event: u64) {
    unlink(&EVENTS, event)
}
/// The execution a ready event belongs to.
pub fn event_origin(event: u64) -> Option<Origin> {
    find(&EVENTS, event)
}

// ------------------------------------------------------------ reported executions

const RING: usize = 256;
static REPORTED: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn fold(o: Origin) -> u64 {
    let x = o.0 ^ o.1.rotate_left(21) ^ (o.2 as u32 as u64).rotate_left(47);
    (x.wrapping_mul(0xff51_afd7_ed55_8ccd) >> 1) | 1
}

/// True the first time a failure of execution `o` is reported (later reports of the same
/// execution, through another output or its completion event, get false). Remembers the
/// last 256 failed executions.
pub fn first_report(o: Origin) -> bool {
    let k = fold(o);
    if REPORTED.iter().any(|r| r.load(Ordering::Relaxed) == k) {
        return false;
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed) % RING;
    REPORTED[i].store(k, Ordering::Relaxed);
    true
}

// ------------------------------------------------------------ OnReady contexts

const CALLBACKS: usize = 4096;

struct Callback {
    used: AtomicU8,
    callback: AtomicUsize,
    user_arg: AtomicUsize,
    handle: AtomicU64,
    start: AtomicU64,
    device: AtomicI32,
}

static CBS: [Callback; CALLBACKS] = [const {
    Callback {
        used: AtomicU8::new(0),
        callback: AtomicUsize::new(0),
        user_arg: AtomicUsize::new(0),
        handle: AtomicU64::new(0),
        start: AtomicU64::new(0),
        device: AtomicI32::new(0),
    }
}; CALLBACKS];
static NEXT_CB: AtomicUsize = AtomicUsize::new(0);

/// Keeps the caller's callback and argument for the interposed one; None when all
/// contexts are in flight (then the caller's callback is passed through unchanged).
pub fn claim_callback(callback: usize, user_arg: usize, o: Origin) -> Option<usize> {
    let start = NEXT_CB.fetch_add(1, Ordering::Relaxed);
    for i in 0..32 {
        let idx = (start + i) % CALLBACKS;
        let c = &CBS[idx];
        if c.used
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            c.callback.store(callback, Ordering::Relaxed);
            c.user_arg.store(user_arg, Ordering::Relaxed);
            c.handle.store(o.0, Ordering::Relaxed);
            c.start.store(o.1, Ordering::Relaxed);
            c.device.store(o.2, Ordering::Relaxed);
            c.used.store(2, Ordering::Release);
            return Some(idx);
        }
    }
    None
}

/// Reads and frees a context: (callback, user_arg, origin).
pub fn take_callback(idx: usize) -> Option<(usize, usize, Origin)> {
    let c = CBS.get(idx)?;
    if c.used.load(Ordering::Acquire) != 2 {
        return None;
    }
    let v = (
        c.callback.load(Ordering::Relaxed),
        c.user_arg.load(Ordering::Relaxed),
        (
            c.handle.load(Ordering::Relaxed),
            c.start.load(Ordering::Relaxed),
            c.device.load(Ordering::Relaxed),
        ),
    );
    c.used.store(0, Ordering::Release);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_find_and_unlink() {
        let o = (0xabc, 77, 1);
        assert!(link_output(0x5000, o));
        assert_eq!(output_origin(0x5000), Some(o));
        assert!(link_event(0x6000, o));
        assert_eq!(event_origin(0x6000), Some(o));
        unlink_event(0x6000);
        assert_eq!(event_origin(0x6000), None);
        unlink_output(0x5000);
        assert_eq!(output_origin(0x5000), None);
        assert!(!link_output(0, o));
    }

    #[test]
    fn one_report_per_execution_and_device() {
        assert!(first_report((1, 2, 0)));
        assert!(!first_report((1, 2, 0)));
        assert!(first_report((1, 2, 1)));
        assert!(first_report((1, 3, 0)));
    }

    #[test]
    fn callback_contexts_round_trip() {
        let i = claim_callback(11, 22, (3, 4, 5)).unwrap();
        assert_eq!(take_callback(i), Some((11, 22, (3, 4, 5))));
        assert_eq!(take_callback(i), None);
    }
}
