//! The PJRT switches, read once from the environment: `MEMWATCH_PJRT=0` turns the
//! whole PJRT interposition off, `MEMWATCH_PJRT_BUFFERS=0` the per-buffer events,
//! `MEMWATCH_PJRT_COMPLETION=0` the execute-completion callbacks, and
//! `MEMWATCH_PJRT_SAMPLE_HZ` sets the memory-statistics rate (default 10, 0 = only
//! after executes). Also whether the shim records PJRT calls at all right now.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

static SWITCHES: AtomicU8 = AtomicU8::new(0);
const S_READ: u8 = 1;
const S_OFF: u8 = 2;
const S_NO_BUFFERS: u8 = 4;
const S_NO_COMPLETION: u8 = 8;
static SAMPLE_PERIOD_NS: AtomicU64 = AtomicU64::new(100_000_000);

fn env(name: &core::ffi::CStr) -> Option<&'static [u8]> {
    // SAFETY: getenv with a NUL-terminated name; the result lives in the environment.
    unsafe {
        let p = libc::getenv(name.as_ptr());
        (!p.is_null()).then(|| core::ffi::CStr::from_ptr(p).to_bytes())
    }
}

fn switches() -> u8 {
    let s = SWITCHES.load(Ordering::Relaxed);
    if s & S_READ != 0 {
        return s;
    }
    let mut s = S_READ;
    if env(c"MEMWATCH_PJRT") == Some(b"0") {
        s |= S_OFF;
    }
    if env(c"MEMWATCH_PJRT_BUFFERS") == Some(b"0") {
        s |= S_NO_BUFFERS;
    }
    if env(c"MEMWATCH_PJRT_COMPLETION") == Some(b"0") {
        s |= S_NO_COMPLETION;
    }
    if let Some(hz) = env(c"MEMWATCH_PJRT_SAMPLE_HZ").and_then(parse_u64) {
        SAMPLE_PERIOD_NS.store(
            if hz == 0 {
                u64::MAX
            } else {
                1_000_000_000 / hz.min(10_000)
            },
            Ordering::Relaxed,
        );
    }
    SWITCHES.store(s, Ordering::Relaxed);
    s
}

pub(super) fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 18 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0u64, |a, d| a * 10 + (d - b'0') as u64))
}

/// Whether the table should be wrapped at all.
pub fn enabled() -> bool {
    switches() & S_OFF == 0 && crate::record::state::wrap_allowed(crate::config::Family::Pjrt)
}

/// Whether wrappers should record (cheap; the shim may have turned off since).
#[inline]
pub fn recording() -> bool {
    crate::record::state::wrap_allowed(crate::config::Family::Pjrt)
}

pub fn buffers_on() -> bool {
    switches() & S_NO_BUFFERS == 0
}

pub fn completion_on() -> bool {
    switches() & S_NO_COMPLETION == 0
}

/// Time between memory-statistics samples (`u64::MAX`: only after executes).
pub fn sample_period_ns() -> u64 {
    switches();
    SAMPLE_PERIOD_NS.load(Ordering::Relaxed)
}
