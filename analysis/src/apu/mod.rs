//! APU memory: on an integrated GPU (Strix Halo), what a capture's programs really hold,
//! by allocation kind, next to what the driver's counters and HIP say (sources and
//! rules: `README.md` in this directory).
//!
//! On an APU the GPU uses the system's RAM: the firmware's VRAM carve-out and the GTT
//! pool are two views of it, HIP reports a figure that is neither, and public reports
//! show `mem_info_gtt_used` not following `hipMalloc` there. So memwatch takes the shim's
//! own accounting of `hipMalloc`, `hipHostMalloc`, `hipMallocManaged` and
//! `hipHostRegister` as the truth, sets the amdgpu sysfs readings of the same run beside
//! it and says where they disagree; and it names requests larger than the device could
//! give.
//!
//! - `detect`: whether a device is an APU (the runtime's answer, else sysfs);
//! - `limits`: how much `hipMalloc` / managed memory can get and what HIP reports (the
//!   same rules as the replay's `strix-halo` profile);
//! - `kinds`: the allocation kinds accounted;
//! - `walk`: the one pass over the capture (live bytes per kind, sysfs readings, failed
//!   requests);
//! - `oversized`: a failed request larger than what the device could give.
//!
//! Nothing here reads files or prints.

pub mod detect;
mod kinds;
pub mod limits;
pub mod oversized;
mod walk;

pub use detect::ApuEvidence;
pub use kinds::ApuKind;
pub use oversized::{is_out_of_memory, OversizedRequest};

use serde::Serialize;

use crate::capture::Loaded;

/// The APU section of a capture's report.
#[derive(Debug, Clone, Serialize)]
pub struct ApuReport {
    pub devices: Vec<ApuDevice>,
}

/// One APU device of a capture (device ordinal as the processes saw it).
#[derive(Debug, Clone, Serialize)]
pub struct ApuDevice {
    pub device: i32,
    /// As the runtime named it (`device_info`).
    pub name: Option<String>,
    pub evidence: ApuEvidence,
    /// What HIP reports as the device's total memory (`hipDeviceTotalMem`).
    pub hip_total_bytes: Option<u64>,
    /// Physical memory the OS managed (what is left after the carve-out).
    pub host_memory_bytes: Option<u64>,
    /// The amdgpu driver's counters of the card during the run; `None` without readings
    /// (a capture not taken by `memwatch run`, or no card under the sysfs root).
    pub sysfs: Option<SysfsView>,
    /// What the shim counted, by kind.
    pub kinds: Vec<KindAccount>,
    /// Most bytes of all kinds live at once on this device (all processes).
    pub shim_peak_bytes: u64,
    /// When (ns since the capture's start).
    pub shim_peak_ns: u64,
    /// The shim's accounting against the driver's counters.
    pub comparison: Comparison,
    /// Failed requests larger than the device could give at that moment.
    pub oversized_requests: Vec<OversizedRequest>,
}

/// What the amdgpu sysfs counters of the card said.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SysfsView {
    /// Readings taken during the run.
    pub readings: u64,
    /// `mem_info_vram_total`: the firmware carve-out.
    pub vram_total_bytes: u64,
    /// `mem_info_gtt_total`: the GTT limit.
    pub gtt_total_bytes: u64,
    /// What `hipMalloc` can get by these totals ([`limits::hip_malloc_limit`]).
    pub hip_malloc_limit_bytes: u64,
    /// The first reading's used bytes (before the programs allocated, when `memwatch
    /// run` took it): (VRAM, GTT).
    pub first_vram_used_bytes: u64,
    pub first_gtt_used_bytes: u64,
}

/// The shim's figures for one kind of allocation on one device.
#[derive(Debug, Clone, Serialize)]
pub struct KindAccount {
    pub kind: ApuKind,
    /// The APIs counted under it.
    pub apis: &'static str,
    /// Successful allocations.
    pub allocs: u64,
    pub peak_bytes: u64,
    /// Still live when the capture ends (processes that ended gave theirs back).
    pub live_bytes_at_end: u64,
}

/// How the shim's accounting and the driver's counters compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Agreement {
    /// Within the tolerance at every reading.
    Agree,
    /// The counters grew by much less than the shim counted: they do not see these
    /// allocations.
    SysfsUnder,
    /// The counters grew by much more: memory the shim did not see (other programs, the
    /// driver, APIs memwatch does not hook).
    SysfsOver,
    /// No reading fell while the shim counted memory on the device.
    NotCompared,
}

/// The comparison at the reading where the shim counted the most.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub status: Agreement,
    /// When (ns since the capture's start); `None` when not compared.
    pub at_ns: Option<u64>,
    /// Bytes of the kinds amdgpu places in VRAM or GTT (device, host pinned, host
    /// registered) the shim counted at that reading, and their growth since the first.
    pub shim_mapped_bytes: u64,
    pub shim_growth_bytes: u64,
    /// Managed bytes at that reading (system pages outside the VRAM/GTT counters).
    pub shim_managed_bytes: u64,
    /// The counters at that reading and their growth since the first.
    pub sysfs_vram_used_bytes: u64,
    pub sysfs_gtt_used_bytes: u64,
    pub sysfs_growth_bytes: i64,
    /// One sentence saying what it means.
    pub message: String,
}

/// Growth below this is not compared (noise of other programs, the driver's own).
pub const MIN_COMPARED_BYTES: u64 = 64 << 20;

/// The APU section of a capture, or `None` when it has no APU device. One pass over the
/// events, only when there is one.
pub fn analyze(loaded: &Loaded) -> Option<ApuReport> {
    let devices = walk::apu_devices(loaded);
    if devices.is_empty() {
        return None;
    }
    Some(ApuReport {
        devices: walk::account(loaded, &devices),
    })
}
