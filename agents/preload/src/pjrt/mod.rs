//! PJRT C API interposition: what XLA-based frameworks (JAX, Reactant.jl ...) do with
//! their PJRT plugin (`xla_cuda_plugin.so`, `xla_rocm_plugin.so`).
//!
//! The framework `dlopen`s the plugin and `dlsym`s `GetPjrtApi`; the shim's `dlsym` hook
//! hands it `table`'s wrapper, which returns a copy of the plugin's function table with a
//! few entries wrapped (`wrap`). This module owns the switches (`MEMWATCH_PJRT=0` turns
//! the whole thing off, `MEMWATCH_PJRT_BUFFERS=0` the per-buffer events,
//! `MEMWATCH_PJRT_COMPLETION=0` the execute-completion callbacks,
//! `MEMWATCH_PJRT_SAMPLE_HZ` the memory-statistics rate, default 10, 0 = only after
//! executes; an execute end asks for a sample too, at most one per 10 ms, the last
//! request of a burst always served), the flusher-side work ([`tick`]: `PJRT_Device_MemoryStats` sampling, never
//! on a framework thread) and the frames the sink writes ([`pending_frames`]).

pub mod abi;
pub mod exec_start;
pub mod pre_attach;
pub mod ready;
pub mod registry;
pub mod table;
pub mod wrap;

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicU8, Ordering};
use memwatch_wire::{encode_record, PjrtExecutable, Record};

pub use table::on_lookup;

static SWITCHES: AtomicU8 = AtomicU8::new(0);
const S_READ: u8 = 1;
const S_OFF: u8 = 2;
const S_NO_BUFFERS: u8 = 4;
const S_NO_COMPLETION: u8 = 8;
static SAMPLE_PERIOD_NS: AtomicU64 = AtomicU64::new(100_000_000);

static MAJOR: AtomicI32 = AtomicI32::new(-1);
static MINOR: AtomicI32 = AtomicI32::new(-1);
static API_SIZE: AtomicU64 = AtomicU64::new(0);

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

fn parse_u64(b: &[u8]) -> Option<u64> {
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

static AT_EXIT_SET: AtomicBool = AtomicBool::new(false);

extern "C" fn stop_sampling_at_exit() {
    crate::panic_guard::catch(stop_sampling);
}

fn start_sampling() {
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
fn stop_sampling() {
    SAMPLING_ON.store(false, Ordering::Release);
    for _ in 0..1_000 {
        if !SAMPLING_NOW.load(Ordering::Acquire) {
            return;
        }
        crate::sink::sleep_ns(1_000_000);
    }
}

/// Asks the flusher for a memory-statistics sample soon (execute end).
#[inline]
fn request_sample() {
    // Load first: no cache-line write (shared with the flusher) when already pending.
    if SAMPLING_ON.load(Ordering::Relaxed) && !SAMPLE_REQUESTED.load(Ordering::Relaxed) {
        SAMPLE_REQUESTED.store(true, Ordering::Relaxed);
    }
}

/// The byte count in a RESOURCE_EXHAUSTED message ("... allocate 123456 bytes",
/// "... allocate 16.00GiB"), 0 when none is named.
pub fn requested_bytes(msg: &[u8]) -> u64 {
    let key = b"allocate ";
    let Some(at) = msg.windows(key.len()).position(|w| w == key) else {
        return 0;
    };
    let rest = &msg[at + key.len()..];
    let int_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if int_len == 0 || int_len > 19 {
        return 0;
    }
    let mut value = parse_u64(&rest[..int_len]).unwrap_or(0) as f64;
    let mut tail = &rest[int_len..];
    if tail.first() == Some(&b'.') {
        let frac = tail[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let mut scale = 0.1;
        for d in &tail[1..1 + frac] {
            value += (d - b'0') as f64 * scale;
            scale /= 10.0;
        }
        tail = &tail[1 + frac..];
    }
    let unit: f64 = if tail.starts_with(b"KiB") {
        1024.0
    } else if tail.starts_with(b"MiB") {
        1048576.0
    } else if tail.starts_with(b"GiB") {
        1073741824.0
    } else if tail.starts_with(b"TiB") {
        1099511627776.0
    } else {
        1.0
    };
    (value * unit) as u64
}

/// Late attach (`memwatch attach`): wraps the live table of the plugin whose
/// `GetPjrtApi` is `get` (NULL: no PJRT plugin is loaded) and starts the pre-attach
/// baseline (`pre_attach`). Returns the start marker's words about it:
/// `pjrt_table=wrapped pjrt_slots=N`, or `pjrt_table=none` with the reason.
///
/// # Safety
/// `get` is NULL or a loaded plugin's `GetPjrtApi`.
pub unsafe fn attach_live(get: *mut core::ffi::c_void) -> String {
    if get.is_null() {
        return "pjrt_table=none(no-plugin-loaded)".to_string();
    }
    // SAFETY: contract above.
    match unsafe { table::wrap_live(get) } {
        Ok(n) if n > 0 => {
            pre_attach::begin();
            format!("pjrt_table=wrapped pjrt_slots={n}")
        }
        Ok(_) => "pjrt_table=none(no-slot-could-be-written)".to_string(),
        Err(why) => format!("pjrt_table=none({})", why.replace(' ', "-")),
    }
}

/// Detach: the plugin's entries go back, sampling stops and the devices are forgotten
/// (the client may be gone before the next attach). Returns the stop marker's words.
pub fn detach_live() -> String {
    let restored = table::unwrap_live();
    pre_attach::end();
    stop_sampling();
    registry::clear_devices();
    format!("restored_pjrt_slots={restored}")
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
    let period = SAMPLE_PERIOD_NS.load(Ordering::Relaxed);
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
        match unsafe { wrap::memory_stats(dev, id, pid, crate::clock::monotonic_ns()) } {
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

/// Encodes `pjrt_executable` frames for executables not yet written (sink, under its
/// lock). `write` returns whether the bytes were delivered.
pub fn pending_frames(mut write: impl FnMut(&[u8]) -> bool) {
    let conv = crate::clock::Converter::sample();
    let pid = crate::record::state::pid();
    registry::drain_new_execs(|handle, i| {
        let x = PjrtExecutable {
            pid,
            ts_ns: conv.ts(i.ts_raw),
            handle,
            flags: i.flags,
            stats: i.stats,
            devices: i.devices[..(i.num_devices as usize).min(registry::EXEC_DEVICES)].to_vec(),
            name: String::from_utf8_lossy(&i.name[..i.name_len as usize]).into_owned(),
            fingerprint: String::from_utf8_lossy(&i.fp[..i.fp_len as usize]).into_owned(),
        };
        let mut out = Vec::new();
        encode_record(&Record::PjrtExecutable(x), &mut out).is_ok() && write(&out)
    });
}

/// In a forked child: executables are announced again in the child's capture.
pub fn reset_in_child() {
    registry::mark_all_new();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_message_sizes() {
        assert_eq!(
            requested_bytes(b"Out of memory while trying to allocate 17179869184 bytes."),
            17179869184
        );
        assert_eq!(requested_bytes(b"failed to allocate 2.50GiB"), 5 << 29);
        assert_eq!(requested_bytes(b"Failed to allocate 512MiB"), 512 << 20);
        assert_eq!(requested_bytes(b"no size here"), 0);
        assert_eq!(requested_bytes(b"allocate "), 0);
    }
}
