//! The runtime report's document: what `memwatch runtime` prints and the OOM doctor and
//! the daemon read (per process: executables as compiled and how often they ran, each
//! device's allocator samples, its runtime peak and what made it up, failed executes and
//! compiles). Definitions of the figures are in `peak`, which computes them.

use memwatch_wire::{PjrtExecutable, PjrtMemoryStats};
use serde::Serialize;

use crate::xla::{Group, PeakBuffer};

/// One memory-statistics sample as reported (absent fields: null).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Sample {
    pub ts_ns: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: Option<u64>,
    pub pool_bytes: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
}

impl Sample {
    pub(super) fn of(s: &PjrtMemoryStats) -> Self {
        Sample {
            ts_ns: s.ts_ns,
            bytes_in_use: s.bytes_in_use.max(0) as u64,
            peak_bytes_in_use: s.get(PjrtMemoryStats::PEAK_BYTES_IN_USE, s.peak_bytes_in_use),
            pool_bytes: s.get(PjrtMemoryStats::POOL_BYTES, s.pool_bytes),
            largest_free_block_bytes: s
                .get(PjrtMemoryStats::LARGEST_FREE_BLOCK, s.largest_free_block),
            bytes_limit: s.get(PjrtMemoryStats::BYTES_LIMIT, s.bytes_limit),
        }
    }
    pub(super) fn peak(&self) -> u64 {
        self.peak_bytes_in_use
            .unwrap_or(self.bytes_in_use)
            .max(self.bytes_in_use)
    }
}

/// An executable as compiled (compiled memory statistics, per device).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutableSummary {
    pub pid: u32,
    pub handle: u64,
    pub name: String,
    pub fingerprint: String,
    pub deserialized: bool,
    pub argument_bytes: Option<u64>,
    pub output_bytes: Option<u64>,
    pub alias_bytes: Option<u64>,
    pub temp_bytes: Option<u64>,
    pub generated_code_bytes: Option<u64>,
    pub executions: u64,
    pub failed_executions: u64,
    pub call_time_ns: u64,
}

impl ExecutableSummary {
    /// `x` as compiled: its name and compiled memory statistics, no executions counted.
    pub fn compiled(x: &PjrtExecutable) -> Self {
        ExecutableSummary {
            pid: x.pid,
            handle: x.handle,
            name: x.name.clone(),
            fingerprint: x.fingerprint.clone(),
            deserialized: x.flags & PjrtExecutable::FLAG_DESERIALIZED != 0,
            argument_bytes: x.stat(x.stats.argument),
            output_bytes: x.stat(x.stats.output),
            alias_bytes: x.stat(x.stats.alias),
            temp_bytes: x.stat(x.stats.temp),
            generated_code_bytes: x.stat(x.stats.generated_code),
            executions: 0,
            failed_executions: 0,
            call_time_ns: 0,
        }
    }
}

/// Live buffers at the peak produced by one executable (or a transfer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveGroup {
    pub producer: String,
    pub bytes: u64,
    pub count: u64,
}

/// The dump module an executable was joined to and its peak's make-up.
#[derive(Debug, Clone, Serialize)]
pub struct DumpJoin {
    pub module: String,
    pub file: String,
    /// "name+stats" when the dump's argument/output/temp bytes equal the compiled
    /// statistics, "name" when only the name matched.
    pub matched_by: String,
    pub argument_bytes: u64,
    pub output_bytes: u64,
    pub temp_bytes: u64,
    pub peak_buffers: Vec<PeakBuffer>,
    pub by_op_name: Vec<Group>,
    /// The module's peak bytes by HLO op category (fusion, dot/conv, ...).
    pub by_category: Vec<Group>,
}

/// One execution overlapping the peak window.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    pub executable: String,
    pub handle: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub completed: bool,
    pub temp_bytes: Option<u64>,
}

/// A device's runtime peak and its attribution.
#[derive(Debug, Clone, Serialize)]
pub struct PeakAttribution {
    pub ts_ns: u64,
    pub window_start_ns: u64,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
    /// The main executable running at the peak (largest compiled temp among `running`).
    pub executable: Option<String>,
    pub running: Vec<Running>,
    /// Live PJRT buffers at the window's end.
    pub live_buffer_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    /// Compiled temp of the main executable (its scratch while it runs).
    pub running_temp_bytes: u64,
    /// `live_buffer_bytes + running_temp_bytes`, capped at the peak.
    pub explained_bytes: u64,
    /// What the two do not cover (allocator rounding, buffers outside PJRT, ...).
    pub unexplained_bytes: u64,
    pub xla: Option<DumpJoin>,
}

/// One device of one process.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRuntime {
    pub device: i32,
    pub samples: u64,
    pub first: Option<Sample>,
    pub last: Option<Sample>,
    pub max_pool_bytes: Option<u64>,
    pub peak: Option<PeakAttribution>,
    /// Every sample (only when asked for).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Sample>,
}

/// An execute that failed with RESOURCE_EXHAUSTED.
#[derive(Debug, Clone, Serialize)]
pub struct OomIncident {
    pub ts_ns: u64,
    pub device: i32,
    pub executable: String,
    pub handle: u64,
    pub result: i32,
    /// The size named in the error message; JAX prints it in human units ("3.25GiB"),
    /// so it is only as exact as the message.
    pub requested_bytes: Option<u64>,
    pub compiled_temp_bytes: Option<u64>,
    /// The failed request is the executable's temp buffer: the compiled temp size,
    /// rounded up to BFC's 256 bytes, lies within the message's rounding of the request.
    pub request_is_temp_buffer: bool,
    /// The exact size of that request when it is the temp buffer (temp rounded to 256).
    pub exact_request_bytes: Option<u64>,
    pub last_stats: Option<Sample>,
    pub live_buffer_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    pub xla: Option<DumpJoin>,
}

/// A compile that failed (no executable came of it): memory asked for while compiling
/// (autotuning scratch) is not in the allocator's peak.
#[derive(Debug, Clone, Serialize)]
pub struct FailedCompile {
    pub ts_ns: u64,
    pub duration_ns: u64,
    /// The PJRT error code (8: RESOURCE_EXHAUSTED).
    pub result: i32,
}

/// One process's runtime report.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessRuntime {
    pub pid: u32,
    pub executables: Vec<ExecutableSummary>,
    pub devices: Vec<DeviceRuntime>,
    /// Executes of this process that failed with RESOURCE_EXHAUSTED.
    pub ooms_total: u64,
    /// Those OOMs in time order: every one, or the first ones
    /// ([`RuntimeReport::list_ooms`]).
    pub ooms: Vec<OomIncident>,
    pub failed_compiles: Vec<FailedCompile>,
}

/// OOMs a process lists by default: the first ones in time. A loop that keeps failing
/// once its pool is full repeats the same incident at every step (a million steps made
/// 455 MB of JSON); `ooms_total` counts them all.
pub const OOMS_LISTED: usize = 20;

/// `memwatch runtime`'s document.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeReport {
    pub processes: Vec<ProcessRuntime>,
    pub damaged_regions: u64,
}

impl RuntimeReport {
    /// Keeps the first `max` OOMs of each process (`None`: all); `ooms_total` still
    /// counts every one.
    pub fn list_ooms(&mut self, max: Option<usize>) {
        if let Some(max) = max {
            for p in &mut self.processes {
                p.ooms.truncate(max);
            }
        }
    }
}
