//! Device memory sampling outside the workload process.
//!
//! Two kinds of reading. `device_reading` frames (the devices and every process on them
//! at one instant, at least every 100 ms and at each failure): the vendor-neutral
//! [`reader::DeviceReader`] with its backends NVIDIA through NVML (`nvml`, loaded at run
//! time by `nvml-wrapper`) and AMD through `librocm_smi64` (`rocm`, loaded at run time
//! by `libloading`), the thread that reads them (`sampling`, woken early by
//! `failure_tap`), and which pids are the watched tree (`watch`); `memwatch run`,
//! `attach` and `agent` all use these. `device_sample` frames (device-wide only): the
//! [`DeviceSampler`] trait, for amdgpu sysfs (`mem_info_vram_used` / `mem_info_gtt_used`,
//! no dependency; VRAM and GTT as separate samples, `memory` 0 and 1, never added
//! together), sampled by the agent ([`run_sampling`]) and written into a `memwatch run`
//! capture by `capture` for the APU section.

pub mod capture;
pub mod failure_tap;
pub mod nvml;
pub mod reader;
pub mod rocm;
pub mod sampling;
pub mod sysfs;
pub mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memwatch_wire::{encode_record, DeviceInfo, DeviceSample, Record};

use crate::forwarder::{Forwarder, StreamKey};

/// One source of device memory readings.
pub trait DeviceSampler: Send {
    /// Short name stored with each sample ("nvml", "rocm_smi", "sysfs").
    fn name(&self) -> &'static str;
    /// The devices it sees (sent once at start).
    fn devices(&mut self) -> Vec<DeviceInfo>;
    /// Current readings; `ts_ns` is CLOCK_MONOTONIC.
    fn sample(&mut self, ts_ns: u64) -> Vec<DeviceSample>;
}

/// CLOCK_MONOTONIC in ns (the clock the shim stamps events with).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The device-wide samplers for the agent's `device_sample` frames: amdgpu sysfs when
/// any card exposes memory counters and no ROCm SMI reader reads the AMD devices
/// already (`rocm_reads`).
pub fn detect(sysfs_root: &std::path::Path, rocm_reads: bool) -> Vec<Box<dyn DeviceSampler>> {
    let mut out: Vec<Box<dyn DeviceSampler>> = Vec::new();
    if !rocm_reads {
        let s = sysfs::SysfsSampler::new(sysfs_root);
        if s.card_count() > 0 {
            out.push(Box::new(s));
        }
    }
    out
}

/// Encodes device infos and samples as frames.
pub fn encode(infos: &[DeviceInfo], samples: &[DeviceSample]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in infos {
        let _ = encode_record(&Record::DeviceInfo(d.clone()), &mut out);
    }
    for s in samples {
        let _ = encode_record(&Record::DeviceSample(s.clone()), &mut out);
    }
    out
}

/// The forwarder as a [`sampling::ReadingOut`]: readings on a node-level stream of their
/// own, after the readers' `device_info` frames.
pub struct ForwarderOut {
    fwd: std::sync::Arc<Forwarder>,
    key: StreamKey,
}

impl ForwarderOut {
    /// Opens the stream and sends the devices the readers see.
    pub fn open(fwd: std::sync::Arc<Forwarder>, readers: &[Box<dyn reader::DeviceReader>]) -> Self {
        let key = fwd.open_stream("");
        let infos: Vec<DeviceInfo> = readers.iter().flat_map(|r| r.infos()).collect();
        if let Err(e) = fwd.push(key, &encode(&infos, &[])) {
            eprintln!("memwatch agent: {e}");
        }
        Self { fwd, key }
    }
}

impl sampling::ReadingOut for ForwarderOut {
    fn write(&mut self, _record: &Record, bytes: &[u8]) {
        if let Err(e) = self.fwd.push(self.key, bytes) {
            eprintln!("memwatch agent: {e}");
        }
    }
}

/// Samples every `period` until `stop`, pushing frames to `fwd` on a node-level stream.
pub fn run_sampling(
    mut samplers: Vec<Box<dyn DeviceSampler>>,
    fwd: &Forwarder,
    period: Duration,
    stop: &AtomicBool,
) {
    let key: StreamKey = fwd.open_stream("");
    let infos: Vec<DeviceInfo> = samplers.iter_mut().flat_map(|s| s.devices()).collect();
    let _ = fwd.push(key, &encode(&infos, &[]));
    while !stop.load(Ordering::Relaxed) {
        let now = monotonic_ns();
        let samples: Vec<DeviceSample> = samplers.iter_mut().flat_map(|s| s.sample(now)).collect();
        if !samples.is_empty() {
            if let Err(e) = fwd.push(key, &encode(&[], &samples)) {
                eprintln!("memwatch agent: {e}");
            }
        }
        let end = std::time::Instant::now() + period;
        while std::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
