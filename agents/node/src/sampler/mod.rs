//! Device memory sampling, once a second, outside the workload process.
//!
//! Owns the [`DeviceSampler`] trait, the choice of samplers on this machine
//! ([`detect`]) and the loop that turns readings into `device_info` / `device_sample`
//! frames for the forwarder ([`run_sampling`]). Backends: NVIDIA through NVML (loaded at
//! run time by `nvml-wrapper`: the agent starts on machines without the library), AMD
//! through `librocm_smi64` (cargo feature `rocm`, loaded at run time) and amdgpu sysfs
//! (`mem_info_vram_used` / `mem_info_gtt_used`, no dependency). VRAM (dedicated or the
//! Strix Halo carve-out) and GTT are reported as separate samples (`memory` 0 and 1) and
//! are never added together. `capture` writes the amdgpu readings into a `memwatch run`
//! capture.

pub mod capture;
pub mod nvml;
#[cfg(feature = "rocm")]
pub mod rocm;
pub mod sysfs;

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

/// The samplers that work on this machine: NVML if it loads; ROCm SMI if built with
/// `rocm` and it loads, else amdgpu sysfs if any card exposes memory counters.
pub fn detect(sysfs_root: &std::path::Path) -> Vec<Box<dyn DeviceSampler>> {
    let mut out: Vec<Box<dyn DeviceSampler>> = Vec::new();
    match nvml::NvmlSampler::new() {
        Ok(s) => out.push(Box::new(s)),
        Err(e) => eprintln!("memwatch agent: NVIDIA sampling off: {e}"),
    }
    #[cfg(feature = "rocm")]
    let have_rocm = match rocm::RocmSampler::new() {
        Ok(s) => {
            out.push(Box::new(s));
            true
        }
        Err(e) => {
            eprintln!("memwatch agent: ROCm SMI sampling off: {e}");
            false
        }
    };
    #[cfg(not(feature = "rocm"))]
    let have_rocm = false;
    if !have_rocm {
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
