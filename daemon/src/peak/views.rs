//! Page models of the Peak page (templates in `web/templates/`), every number already
//! formatted. No I/O here.

use askama::Template;

use crate::runtime::RuntimePanel;

#[derive(Template)]
#[template(path = "peak.html")]
pub struct PeakPage {
    pub id: i64,
    pub device: i64,
    pub device_label: String,
    /// (ordinal, label) of the devices shown.
    pub devices: Vec<(i64, String)>,
    /// The first out-of-memory failure on this device: the page leads with it.
    pub failed: Option<FailedView>,
    pub missing: bool,
    /// What the device held before an attach (`runs::pre_attach_line`), or empty.
    pub held_before: String,
    pub peak: String,
    pub peak_at: String,
    pub zoom_from: u64,
    pub zoom_to: u64,
    pub live_allocations: u64,
    pub shown: u64,
    pub dims: Vec<DimView>,
    /// PJRT runtime attribution (`runtime::panel`), when the run has PJRT records.
    pub runtime: Option<RuntimePanel>,
    /// Set when the page shows an instant (`?at=NS`) instead of the peak.
    pub at: Option<u64>,
    /// At an instant: the framework (PJRT) buffers live then, by producing executable
    /// and, with a dump, by op_name.
    pub framework_live: Vec<FrameworkLiveView>,
    pub framework_total: String,
    /// Set when the instant asked for lies in time whose raw events retention deleted:
    /// the page shows the nearest exact instant before it and says so.
    pub moved_from: Option<String>,
}

pub struct DimView {
    pub title: &'static str,
    pub groups: Vec<GroupView>,
}

pub struct GroupView {
    pub key: String,
    pub bytes: String,
    pub count: u64,
    pub pct: String,
    pub pct_int: i64,
    pub allocs: Vec<AllocView>,
    pub more: u64,
}

pub struct AllocView {
    pub size: String,
    pub ptr: String,
    pub at: String,
    pub api: String,
    pub thread: String,
    pub note: String,
}

/// The request that failed, as the Peak page of an OOM run leads with it.
pub struct FailedView {
    /// The executable and API (`jit_update (PJRT_LoadedExecutable_Execute:complete)`), or
    /// the driver call.
    pub what: String,
    /// `RESOURCE_EXHAUSTED`, `CUDA_ERROR_OUT_OF_MEMORY`, ...
    pub error: String,
    pub requested: String,
    pub live_then: String,
    pub at: String,
    pub at_ns: u64,
    /// The page shows the instant of the failure.
    pub shown_now: bool,
    pub pid: i64,
    /// Further OOM failures on this device.
    pub more: usize,
    /// The run's stored verdict (empty: none).
    pub verdict_kind: String,
    pub verdict_headline: String,
}

/// One producer's live framework buffers as the page shows them.
pub struct FrameworkLiveView {
    pub executable: String,
    /// The joined XLA module, "" when no attached dump has it.
    pub module: String,
    pub count: i64,
    pub bytes: String,
    /// Whether it is an executable (a dump would name its values).
    pub executable_output: bool,
    /// (op_name, instructions, buffers, bytes).
    pub values: Vec<(String, String, i64, String)>,
}

impl FrameworkLiveView {
    pub fn of(g: &crate::framework::LiveAt) -> Self {
        Self {
            executable: g.executable.clone(),
            module: g.module.clone(),
            count: g.count,
            bytes: crate::render::fmt::bytes(g.bytes),
            executable_output: g.executable_output,
            values: g
                .values
                .iter()
                .map(|v| {
                    (
                        v.op_name.clone(),
                        v.instructions.join(", "),
                        v.count,
                        crate::render::fmt::bytes(v.bytes),
                    )
                })
                .collect(),
        }
    }
}
