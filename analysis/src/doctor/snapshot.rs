//! A PyTorch memory snapshot as the doctor's evidence: one [`FrameworkState`] per device —
//! the last out-of-memory failure the allocator recorded (request, allocated, reserved,
//! the largest free block of the request's pool, the Python frame that asked: from
//! `crate::torch::report`), the allocator's settings, allocated and reserved bytes at the
//! end, and allocated bytes at the start of each step of the loop
//! that the trace's allocations repeat (`super::steps::loop_steps`; steps that free
//! nothing are not a loop's), so a leak's growth per step comes from the framework's own
//! records.

use super::evidence::{FrameworkOom, FrameworkState};
use super::steps::loop_steps;
use super::DoctorError;
use crate::torch::model::Action;
use crate::torch::replay::{self, EndCheck, Observer, Sim, Step};
use crate::torch::scan::Trace;
use crate::torch::{Frame, OomReport, ReportOptions};
use std::path::Path;

/// One device's allocations in trace order: (stack, requested bytes) and the allocated
/// bytes just before each; and the last free's place (allocations before it).
#[derive(Default)]
struct Allocs {
    keys: Vec<(u32, u64)>,
    allocated_before: Vec<u64>,
    last_free_after: Option<usize>,
}

struct Collect {
    source: String,
    cur: Allocs,
    states: Vec<FrameworkState>,
}

impl Observer for Collect {
    type Error = std::convert::Infallible;

    fn device_start(&mut self, _sim: &Sim, _trace: Option<&Trace>) -> Result<(), Self::Error> {
        self.cur = Allocs::default();
        Ok(())
    }

    fn before(&mut self, sim: &Sim, step: &Step) -> Result<(), Self::Error> {
        if step.action == Action::Alloc && !step.before {
            self.cur.keys.push((step.stack.0, step.requested));
            self.cur.allocated_before.push(sim.allocated);
        }
        if step.action == Action::FreeRequested && !step.before {
            self.cur.last_free_after = Some(self.cur.keys.len());
        }
        Ok(())
    }

    fn after(&mut self, _sim: &Sim, _step: &Step) -> Result<(), Self::Error> {
        Ok(())
    }

    fn device_end(&mut self, sim: &Sim, _check: &EndCheck) -> Result<(), Self::Error> {
        let a = std::mem::take(&mut self.cur);
        // Steps that release nothing are data being kept, not a loop's steps.
        let allocated_per_step = loop_steps(&a.keys)
            .filter(|starts| {
                a.last_free_after
                    .is_some_and(|f| starts.first().is_some_and(|s| f > *s))
            })
            .map(|starts| starts.iter().map(|&i| a.allocated_before[i]).collect())
            .unwrap_or_default();
        self.states.push(FrameworkState {
            source: self.source.clone(),
            device: sim.device,
            allocated_bytes: sim.allocated,
            reserved_bytes: sim.reserved,
            largest_free_block_bytes: None,
            allocated_per_step,
            ..FrameworkState::default()
        });
        Ok(())
    }
}

/// Reads a snapshot (`torch.cuda.memory._dump_snapshot`) into one state per device.
pub fn framework_states(path: &Path) -> Result<Vec<FrameworkState>, DoctorError> {
    let scan = crate::torch::scan_path(path)?;
    let opts = ReportOptions {
        top: 0,
        sites: 0,
        buckets: 1,
        ..ReportOptions::default()
    };
    let report = crate::torch::report(&scan, &opts)?;
    let mut c = Collect {
        source: path.display().to_string(),
        cur: Allocs::default(),
        states: Vec::new(),
    };
    replay::replay(&scan, &mut c).map_err(|e| match e {
        replay::ReplayError::Io(err) => DoctorError::Io {
            path: path.to_path_buf(),
            err,
        },
        replay::ReplayError::Observer(never) => match never {},
    })?;
    for s in &mut c.states {
        s.expandable_segments = report.allocator_settings.expandable_segments;
        s.alloc_conf = report.allocator_settings.conf.clone();
        let dev = report.devices.iter().find(|d| d.device == s.device);
        s.oom = dev.and_then(|d| d.ooms.last()).map(oom);
        s.largest_free_block_bytes = s.oom.as_ref().map(|o| o.largest_free_block_bytes);
    }
    Ok(c.states)
}

fn oom(o: &OomReport) -> FrameworkOom {
    FrameworkOom {
        request_bytes: o.requested_bytes,
        allocated_bytes: o.allocated_bytes,
        reserved_bytes: o.reserved_bytes,
        reserved_unallocated_bytes: o.reserved_unallocated_bytes,
        largest_free_block_bytes: o.largest_free_block_bytes,
        pool: o.pool.to_string(),
        device_free_bytes: o.device_free_bytes,
        at_s: o.at_ns as f64 / 1e9,
        python_frame: python_frame(&o.frames),
        site: o.site.clone(),
    }
}

/// The innermost Python frame outside the `torch` package: `file:line in function`.
fn python_frame(frames: &[Frame]) -> Option<String> {
    frames
        .iter()
        .find(|f| f.is_python() && !f.filename.contains("/torch/"))
        .map(|f| format!("{}:{} in {}", f.filename, f.line, f.name))
}
