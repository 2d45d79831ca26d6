//! Hot-path timestamps.
//!
//! Owns the clock the hooks read. A CLOCK_MONOTONIC read (vDSO) costs 50-75 ns on the
//! 2-core VM this was written on and `rdtsc` about 39 ns, and a hooked call needs two
//! (start, end), so on x86-64 with an invariant TSC (CPUID 0x80000007 EDX bit 8) the hooks
//! store raw TSC ticks and the flusher converts them to CLOCK_MONOTONIC nanoseconds
//! ([`Converter`]) against an anchor taken at start-up and a fresh sample per flush.
//! `MEMWATCH_CLOCK=monotonic` (or any other CPU) uses clock_gettime directly.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static USE_TSC: AtomicBool = AtomicBool::new(false);
static ANCHOR_TSC: AtomicU64 = AtomicU64::new(0);
static ANCHOR_NS: AtomicU64 = AtomicU64::new(0);

/// CLOCK_MONOTONIC in nanoseconds.
#[inline]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    // cpuid is available on every x86-64 CPU (safe intrinsic).
    let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max_ext >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Chooses the clock (once, at start-up, before recording starts).
pub fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: getenv with a NUL-terminated name.
        let forced = unsafe { !libc::getenv(c"MEMWATCH_CLOCK".as_ptr()).is_null() };
        if !forced && invariant_tsc() {
            ANCHOR_TSC.store(tsc(), Ordering::Relaxed);
            ANCHOR_NS.store(monotonic_ns(), Ordering::Relaxed);
            USE_TSC.store(true, Ordering::Release);
        }
    }
}

/// A raw hot-path timestamp (TSC ticks or nanoseconds; see [`Converter`]).
#[inline]
pub fn raw() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if USE_TSC.load(Ordering::Relaxed) {
        return tsc();
    }
    monotonic_ns()
}

/// Turns raw timestamps into CLOCK_MONOTONIC nanoseconds (flusher side).
pub struct Converter {
    tsc_now: u64,
    ns_now: u64,
    ns_per_tick: f64,
    identity: bool,
}

impl Converter {
    /// Samples the clocks now; waits until at least 1 ms has passed since the anchor so
    /// the tick rate is measured over a usable baseline.
    pub fn sample() -> Self {
        #[cfg(target_arch = "x86_64")]
        if USE_TSC.load(Ordering::Acquire) {
            let (t0, n0) = (
                ANCHOR_TSC.load(Ordering::Relaxed),
                ANCHOR_NS.load(Ordering::Relaxed),
            );
            loop {
                let (t, n) = (tsc(), monotonic_ns());
                if n.saturating_sub(n0) >= 1_000_000 && t > t0 {
                    return Converter {
                        tsc_now: t,
                        ns_now: n,
                        ns_per_tick: (n - n0) as f64 / (t - t0) as f64,
                        identity: false,
                    };
                }
                core::hint::spin_loop();
            }
        }
        Converter {
            tsc_now: 0,
            ns_now: 0,
            ns_per_tick: 1.0,
            identity: true,
        }
    }

    /// A raw start time as nanoseconds.
    #[inline]
    pub fn ts(&self, raw: u64) -> u64 {
        if self.identity {
            return raw;
        }
        let back = self.tsc_now as i128 - raw as i128;
        (self.ns_now as i128 - (back as f64 * self.ns_per_tick) as i128).max(0) as u64
    }

    /// A raw duration as nanoseconds.
    #[inline]
    pub fn dur(&self, raw: u64) -> u64 {
        if self.identity {
            return raw;
        }
        (raw as f64 * self.ns_per_tick) as u64
    }
}
