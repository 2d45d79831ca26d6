//! What was there before a late attach: the baseline `memwatch attach` records for a
//! PJRT process whose table it wrapped in place (`table::wrap_live`).
//!
//! The PJRT C API has no call that lists a client's buffers or devices, and the
//! client itself is not reachable from the table, so the baseline is taken at the first
//! calls after attach that name them: an execute names its executable (described then,
//! if it was compiled before attach: name, outputs, devices) and its argument buffers.
//! Every argument buffer not created since the attach lived before it: it is recorded
//! once, as an allocation (`Api::PjrtBufferPreAttach`, stamped with the attach time,
//! with its on-device size), so its later release pairs with it like any other buffer.
//! The flusher then writes two markers: `pre-attach-pjrt-sample` per device (the first
//! allocator sample after attach: what the framework's pool held) and
//! `pre-attach-pjrt-buffers` (how many live buffers and bytes the first executes
//! named). The set of buffers seen since attach is a `HashSet` behind a `try_lock`:
//! a contended or poisoned lock skips the bookkeeping of that call, never waits.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::HashSet;
use std::sync::Mutex;

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Buffers created since the attach or already reported as pre-attach ones.
static KNOWN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);
/// The attach time in raw clock units (the pre-attach buffers' timestamp).
static ATTACH_RAW: AtomicU64 = AtomicU64::new(0);
/// Pre-attach buffers found so far, and their bytes.
static FOUND: AtomicU64 = AtomicU64::new(0);
static FOUND_BYTES: AtomicU64 = AtomicU64::new(0);
/// The `pre-attach-pjrt-buffers` marker is due (set after an execute found some).
static BUFFERS_MARKER_DUE: AtomicBool = AtomicBool::new(false);
/// The `pre-attach-pjrt-sample` markers are due (the first sample after attach).
static SAMPLE_MARKER_DUE: AtomicBool = AtomicBool::new(false);

/// Starts baseline discovery (attach).
pub fn begin() {
    if let Ok(mut k) = KNOWN.lock() {
        *k = Some(HashSet::new());
    }
    ATTACH_RAW.store(crate::clock::raw(), Ordering::Relaxed);
    FOUND.store(0, Ordering::Relaxed);
    FOUND_BYTES.store(0, Ordering::Relaxed);
    BUFFERS_MARKER_DUE.store(false, Ordering::Relaxed);
    SAMPLE_MARKER_DUE.store(true, Ordering::Relaxed);
    ACTIVE.store(true, Ordering::Release);
}

/// Ends it (detach).
pub fn end() {
    ACTIVE.store(false, Ordering::Release);
    SAMPLE_MARKER_DUE.store(false, Ordering::Relaxed);
    BUFFERS_MARKER_DUE.store(false, Ordering::Relaxed);
    if let Ok(mut k) = KNOWN.try_lock() {
        *k = None;
    }
}

/// Whether the process was attached to late (its table wrapped in place).
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The attach time, raw clock units.
pub fn attach_raw() -> u64 {
    ATTACH_RAW.load(Ordering::Relaxed)
}

fn with_known<R>(f: impl FnOnce(&mut HashSet<u64>) -> R) -> Option<R> {
    let mut guard = KNOWN.try_lock().ok()?;
    guard.as_mut().map(f)
}

/// A buffer created after the attach.
pub fn created(buf: u64) {
    if active() {
        with_known(|k| k.insert(buf));
    }
}

/// A buffer released after the attach.
pub fn released(buf: u64) {
    if active() {
        with_known(|k| k.remove(&buf));
    }
}

/// Whether `buf`, named by an execute, is seen here for the first time (so it was
/// created before the attach); it is known from now on.
pub fn first_sight(buf: u64) -> bool {
    active() && with_known(|k| k.insert(buf)).unwrap_or(false)
}

/// Counts a pre-attach buffer of `bytes` (its marker is written by the flusher).
pub fn found(bytes: u64) {
    FOUND.fetch_add(1, Ordering::Relaxed);
    FOUND_BYTES.fetch_add(bytes, Ordering::Relaxed);
    BUFFERS_MARKER_DUE.store(true, Ordering::Relaxed);
}

/// Flusher side: the text of the `pre-attach-pjrt-buffers` marker when one is due.
pub fn take_buffers_marker() -> Option<String> {
    if !BUFFERS_MARKER_DUE.swap(false, Ordering::Relaxed) {
        return None;
    }
    Some(format!(
        "pre-attach-pjrt-buffers count={} bytes={} source=execute-arguments",
        FOUND.load(Ordering::Relaxed),
        FOUND_BYTES.load(Ordering::Relaxed)
    ))
}

/// Flusher side: whether the next sample is the first after attach (its markers are
/// then written with it). True once.
pub fn take_sample_marker() -> bool {
    SAMPLE_MARKER_DUE.swap(false, Ordering::Relaxed)
}
