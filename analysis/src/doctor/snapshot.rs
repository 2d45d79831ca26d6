//! A PyTorch memory snapshot as the doctor's evidence: replays the snapshot's trace
//! (`crate::torch::replay`) into one [`FrameworkState`] per device — allocated and
//! reserved bytes at the end, and allocated bytes at the start of each step of the loop
//! that the trace's allocations repeat (`super::steps::loop_steps`; steps that free
//! nothing are not a loop's), so a leak's growth per step comes from the framework's own
//! records.

use super::evidence::FrameworkState;
use super::steps::loop_steps;
use super::DoctorError;
use crate::torch::model::Action;
use crate::torch::replay::{self, EndCheck, Observer, Sim, Step};
use crate::torch::scan::Trace;
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
        });
        Ok(())
    }
}

/// Reads a snapshot (`torch.cuda.memory._dump_snapshot`) into one state per device.
pub fn framework_states(path: &Path) -> Result<Vec<FrameworkState>, DoctorError> {
    let scan = crate::torch::scan_path(path)?;
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
    Ok(c.states)
}
