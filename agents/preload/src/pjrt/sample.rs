//! The memory-statistics sampler: `PJRT_Device_MemoryStats` of every known device,
//! called on the flusher thread only ([`tick`]), never on a framework thread.
//!
//! Owns when a sample is due (the configured rate, `switches::sample_period_ns`, or
//! soon after an execute asked for one with [`request_sample`]: at most one per 10 ms,
//! the last request of a burst always served), starting sampling once the client's
//! devices are known, stopping it before the client is destroyed (and at exit, before
//! the plugin's own destructors), and the `pjrt_memory_stats` frames and pre-attach
//! markers it writes.

use super::{plugin, pre_attach, registry, switches};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use memwatch_wire::{encode_record, Record};

/// Sampling state: devices known and the client alive.
static SAMPLING_ON: AtomicBool = AtomicBool::new(false);
/// The flusher is inside `PJRT_Device_MemoryStats` calls.
static SAMPLING_NOW: AtomicBool = AtomicBool::new(false);
static SAMPLE_REQUESTED: AtomicBool = AtomicBool::new(false);
static LAST_SAMPLE_NS: AtomicU64 = AtomicU64::new(0);
static SAMPLES_FAILED: AtomicU32 = AtomicU32::new(0);
/// Smallest gap between samples asked for by executes (10 ms): an execute ending more
/// than 10 ms after the last sample gets its own sample; a burst of short executes gets
/// at most 100 samples a second, plus one after its last execute (the request stays
/// pending until the flusher takes it). Each sample takes the plugin's allocator lock,
/// so sampling after every one of thousands of tiny executes slowed them down.
const MIN_REQUEST_GAP_NS: u64 = 10_000_000;

static AT_EXIT_SET: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_sampling_at_exit() {
    crate::panic_guard::catch(stop_sampling);
}

pub(super) fn start_sampling() {
    SAMPLING_ON.store(true, Ordering::Release);
    // Registered after the plugin was loaded and initialised, so it runs before the
    // plugin's own exit-time destructors: no sample is taken from a torn-down plugin.
    if !AT_EXIT_SET.swap(true, Ordering::AcqRel) {
        // SAFETY: registering a plain extern "C" fn.
        unsafe { libc::atexit(stop_sampling_at_exit) };
    }
}

/// Called before the client is destroyed: no new samples, and waits (bounded, 1 s) for
/// one in progress on the flusher so no device pointer is used after the client is gone.
pub(super) fn stop_sampling() {
    SAMPLING_ON.store(false, Ordering::Release);
    for _ in 0..1_000 {
        if !SAMPLING_NOW.load(Ordering::Acquire) {
            return;
        }
        crate::clock::sleep_ns(1_000_000);
    }
}

/// Asks the flusher for a memory-statistics sample soon (execute end).
#[inline]
pub(super) fn request_sample() {
    // Load first: no cache-line write (shared with the flusher) when already pending.
    if SAMPLING_ON.load(Ordering::Relaxed) && !SAMPLE_REQUESTED.load(Ordering::Relaxed) {
        SAMPLE_REQUESTED.store(true, Ordering::Relaxed);
    }
}

/// Flusher-thread work: samples every known device's memory statistics when due (the
/// configured rate, or soon after an execute) and writes the frames.
pub fn tick() {
    if !SAMPLING_ON.load(Ordering::Acquire) || crate::record::state::EXITING.load(Ordering::Acquire)
    {
        return;
    }
    let now = crate::clock::monotonic_ns();
    let last = LAST_SAMPLE_NS.load(Ordering::Relaxed);
    let period = switches::sample_period_ns();
    let requested =
        SAMPLE_REQUESTED.load(Ordering::Relaxed) && now.saturating_sub(last) >= MIN_REQUEST_GAP_NS;
    if !requested && now.saturating_sub(last) < period {
        return;
    }
    SAMPLE_REQUESTED.store(false, Ordering::Relaxed);
    LAST_SAMPLE_NS.store(now, Ordering::Relaxed);
    SAMPLING_NOW.store(true, Ordering::SeqCst);
    if !SAMPLING_ON.load(Ordering::SeqCst) || SAMPLES_FAILED.load(Ordering::Relaxed) > 100 {
        SAMPLING_NOW.store(false, Ordering::Release);
        return;
    }
    let pid = crate::record::state::pid();
    let mut out = Vec::new();
    let first_after_attach = pre_attach::active() && pre_attach::take_sample_marker();
    registry::for_each_device(|dev, id| {
        // SAFETY: a device pointer the plugin gave the framework; the client is alive
        // (client_destroy waits for SAMPLING_NOW to clear).
        match unsafe { plugin::memory_stats(dev, id, pid, crate::clock::monotonic_ns()) } {
            Some(s) => {
                if first_after_attach {
                    let _ = encode_record(&baseline_sample_marker(&s), &mut out);
                }
                let _ = encode_record(&Record::PjrtMemoryStats(s), &mut out);
            }
            None => {
                SAMPLES_FAILED.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    SAMPLING_NOW.store(false, Ordering::Release);
    if let Some(text) = pre_attach::take_buffers_marker() {
        let _ = encode_record(&marker(pid, -1, text), &mut out);
    }
    crate::sink::write_frames(&out);
}

fn marker(pid: u32, device: i32, text: String) -> Record {
    Record::Marker(memwatch_wire::Marker {
        pid,
        // SAFETY: plain system call.
        tid: unsafe { libc::syscall(libc::SYS_gettid) } as u32,
        ts_ns: crate::clock::monotonic_ns(),
        device,
        text,
    })
}

/// The `pre-attach-pjrt-sample` marker: the framework allocator's state as the first
/// sample after a late attach found it (what its pool held before).
fn baseline_sample_marker(s: &memwatch_wire::PjrtMemoryStats) -> Record {
    use memwatch_wire::PjrtMemoryStats as S;
    let v = |flag, x| s.get(flag, x).map_or("-".to_string(), |n| n.to_string());
    marker(
        s.pid,
        s.device,
        format!(
            "pre-attach-pjrt-sample device={} bytes_in_use={} peak_bytes_in_use={} \
             pool_bytes={} bytes_limit={} num_allocs={} source=PJRT_Device_MemoryStats",
            s.device,
            v(S::BYTES_IN_USE, s.bytes_in_use),
            v(S::PEAK_BYTES_IN_USE, s.peak_bytes_in_use),
            v(S::POOL_BYTES, s.pool_bytes),
            v(S::BYTES_LIMIT, s.bytes_limit),
            v(S::NUM_ALLOCS, s.num_allocs),
        ),
    )
}
