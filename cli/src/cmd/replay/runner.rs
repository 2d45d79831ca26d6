//! One replay of the trace against one target: where the capacity comes from (a device
//! profile, `--capacity`, or what the trace recorded), the memory fraction and model
//! spec for an allocator, the progress bar of a long replay, and the run itself.

use std::path::Path;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use memwatch_analysis::alloc::device::{self, DeviceProfile};
use memwatch_analysis::alloc::replay::{self, ReplayOptions, ReplayResult};
use memwatch_analysis::alloc::trace::{self, Trace};
use memwatch_analysis::alloc::{AllocatorKind, ModelSpec};

/// Where the capacity came from.
#[derive(Clone, Debug)]
pub(super) struct Target {
    pub(super) label: String,
    pub(super) capacity: u64,
    pub(super) device: Option<DeviceProfile>,
    /// The trace recorded its own pool limit (bfc_validate documents).
    pub(super) recorded: bool,
}

impl Target {
    /// A device profile's capacity, labelled with its name.
    pub(super) fn of_device(d: &DeviceProfile) -> Target {
        Target {
            label: d.name.clone(),
            capacity: d.capacity_bytes,
            device: Some(d.clone()),
            recorded: false,
        }
    }
}

pub(super) fn load_trace(path: &Path, device: Option<i32>) -> Result<Trace> {
    let bytes = std::fs::read(path).with_context(|| format!("reading trace {}", path.display()))?;
    trace::read_any(&bytes, device).with_context(|| format!("trace {}", path.display()))
}

fn default_fraction(kind: AllocatorKind) -> f64 {
    match kind {
        AllocatorKind::Bfc | AllocatorKind::Async => device::JAX_DEFAULT_MEM_FRACTION,
        AllocatorKind::Platform | AllocatorKind::Torch => 1.0,
    }
}

/// The memory fraction of allocator `k` on `t`: `--mem-fraction`, else all of a pool
/// the trace recorded, else the allocator's default.
pub(super) fn fraction_for(mem_fraction: Option<f64>, k: AllocatorKind, t: &Target) -> f64 {
    mem_fraction.unwrap_or(if t.recorded { 1.0 } else { default_fraction(k) })
}

pub(super) fn resolve_device(name: &str) -> Result<DeviceProfile> {
    device::resolve(name).with_context(|| format!("--device {name}"))
}

pub(super) fn spec_for(
    kind: AllocatorKind,
    limit: u64,
    preallocate: bool,
    target: &Target,
) -> ModelSpec {
    ModelSpec {
        kind,
        limit,
        preallocate,
        granularity: target
            .device
            .as_ref()
            .map_or(device::DEFAULT_GRANULARITY, |d| d.granularity),
        device_free_bytes: None,
    }
}

pub(super) fn progress_bar(len: u64, msg: &str, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} events ({per_sec}, eta {eta})")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(msg.to_string());
    pb
}

/// Long replays get a progress bar (stderr, hidden when not a terminal).
pub(super) const PROGRESS_MIN_EVENTS: usize = 1_000_000;

pub(super) struct Run {
    pub(super) target: Target,
    pub(super) kind: AllocatorKind,
    pub(super) fraction: f64,
    pub(super) preallocate: bool,
    pub(super) limit: u64,
    pub(super) result: ReplayResult,
}

pub(super) fn run_one(
    trace: &Trace,
    target: &Target,
    kind: AllocatorKind,
    fraction: f64,
    preallocate: bool,
    steps: bool,
) -> Result<Run> {
    let limit = if target.recorded && fraction == 1.0 {
        target.capacity
    } else {
        device::pool_limit(target.capacity, fraction)
    };
    if limit == 0 {
        bail!(
            "capacity {} x mem fraction {fraction} is a pool of 0 bytes",
            target.capacity
        );
    }
    let spec = spec_for(kind, limit, preallocate, target);
    let pb = progress_bar(
        trace.len() as u64,
        &format!("{} on {}", kind.name(), target.label),
        trace.len() >= PROGRESS_MIN_EVENTS,
    );
    let result = replay::replay_spec(
        trace,
        &spec,
        ReplayOptions {
            record_steps: steps,
            ..Default::default()
        },
        &mut |n| pb.set_position(n as u64),
    )
    .context("allocator model failed its own consistency check (a memwatch bug)")?;
    pb.finish_and_clear();
    Ok(Run {
        target: target.clone(),
        kind,
        fraction,
        preallocate,
        limit,
        result,
    })
}
