//! Hot-path timestamps.
//!
//! Owns the clock the hooks read. A CLOCK_MONOTONIC read (vDSO) costs about twice an
//! `rdtsc` (18-22 ns vs 8-12 ns in a loop on the 2-core VM this was measured on; more
//! under load), allocation and release events read it once (start) and API spans twice
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

/// A TSC value and a CLOCK_MONOTONIC value taken at (nearly) the same instant: the
/// monotonic read bracketed by two TSC reads, the tightest of 4 tries, its midpoint. A
/// thread preempted between two plain back-to-back reads would shift every conversion
/// of a pass by the time it lost.
#[cfg(target_arch = "x86_64")]
fn paired_reading() -> (u64, u64) {
    let mut best = (u64::MAX, 0u64, 0u64);
    for _ in 0..4 {
        let a = tsc();
        let n = monotonic_ns();
        let b = tsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, a.wrapping_add(width / 2), n);
        }
    }
    (best.1, best.2)
}

/// Chooses the clock (once, at start-up, before recording starts).
pub fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: getenv with a NUL-terminated name.
        let forced = unsafe { !libc::getenv(c"MEMWATCH_CLOCK".as_ptr()).is_null() };
        if !forced && invariant_tsc() {
            let (t, n) = paired_reading();
            ANCHOR_TSC.store(t, Ordering::Relaxed);
            ANCHOR_NS.store(n, Ordering::Relaxed);
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

/// Turns raw timestamps into CLOCK_MONOTONIC nanoseconds (flusher side). Integer
/// fixed-point (ns per tick << 32), so converting a frame of events costs a multiply
/// per event, no float <-> 128-bit conversions.
pub struct Converter {
    tsc_now: u64,
    ns_now: u64,
    /// Nanoseconds per tick, times 2^32.
    mult: u128,
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
                let (t, n) = paired_reading();
                if n.saturating_sub(n0) >= 1_000_000 && t > t0 {
                    return Converter {
                        tsc_now: t,
                        ns_now: n,
                        mult: (u128::from(n - n0) << 32) / u128::from(t - t0),
                        identity: false,
                    };
                }
                core::hint::spin_loop();
            }
        }
        Converter {
            tsc_now: 0,
            ns_now: 0,
            mult: 1 << 32,
            identity: true,
        }
    }

    #[inline]
    fn ticks_to_ns(&self, ticks: u64) -> u64 {
        u64::try_from((u128::from(ticks) * self.mult) >> 32).unwrap_or(u64::MAX)
    }

    /// A raw start time as nanoseconds.
    #[inline]
    pub fn ts(&self, raw: u64) -> u64 {
        if self.identity {
            return raw;
        }
        if raw <= self.tsc_now {
            self.ns_now
                .saturating_sub(self.ticks_to_ns(self.tsc_now - raw))
        } else {
            self.ns_now
                .saturating_add(self.ticks_to_ns(raw - self.tsc_now))
        }
    }

    /// A raw duration as nanoseconds.
    #[inline]
    pub fn dur(&self, raw: u64) -> u64 {
        if self.identity {
            return raw;
        }
        self.ticks_to_ns(raw)
    }
}

/// Sleeps `ns` nanoseconds (the flusher and the sink lock wait between tries).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_point_conversion_matches_the_rate() {
        // 2.5 ticks per ns -> 0.4 ns per tick.
        let c = Converter {
            tsc_now: 10_000_000,
            ns_now: 5_000_000,
            mult: (4u128 << 32) / 10,
            identity: false,
        };
        assert!(c.ts(10_000_000).abs_diff(5_000_000) <= 1);
        assert!(c.ts(9_000_000).abs_diff(4_600_000) <= 1);
        assert!(c.ts(10_000_100).abs_diff(5_000_040) <= 1);
        assert!(c.ts(0).abs_diff(1_000_000) <= 1);
        assert!(c.dur(1000).abs_diff(400) <= 1);
        let id = Converter {
            tsc_now: 0,
            ns_now: 0,
            mult: 1 << 32,
            identity: true,
        };
        assert_eq!(id.ts(123), 123);
        assert_eq!(id.dur(77), 77);
    }
}
