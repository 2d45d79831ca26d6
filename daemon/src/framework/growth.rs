//! Growth and leaks by the doctor's rules, the ones `memwatch diagnose` applies: an
//! executable whose step outputs stay live (`memwatch_analysis::doctor::steps::
//! execution_leaks`, on the PJRT rows the caller reads at the moment the doctor looks),
//! and a device's raw driver memory (`steps::growth_until` on the allocations live then);
//! a PyTorch snapshot's allocated blocks (no steps, no driver allocations) by
//! `memwatch_analysis::growth::ramp`. Pure: the caller reads the series, the PJRT rows
//! and the allocations.

use serde::Serialize;

use std::collections::BTreeMap;

use memwatch_analysis::doctor::steps::{growth_until, ExecutionLeak};
use memwatch_analysis::growth::{ramp, Sample};

use crate::db::snapshot::LiveAlloc;

use super::read::FrameworkTimeline;
use super::series;
use crate::render::Point;

/// Buckets a whole-run read for growth aims at.
pub const GROWTH_POINTS: usize = 256;

/// One executable's (or other producer's) live outputs over the run.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExecutableGrowth {
    pub name: String,
    pub executions: i64,
    /// Live bytes it produced at the end of the run, and their maximum.
    pub live_end: i64,
    pub live_peak: i64,
    /// Bytes its leaking steps keep live by the doctor's rule (`execution_leaks`); 0 when
    /// its step outputs do not stay.
    pub growth_bytes: i64,
    /// What each leaking step keeps (the doctor's `growth_per_step_bytes`; 0 without).
    pub per_execution: i64,
    pub growing: bool,
}

/// A run that keeps accumulating framework memory.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Growing {
    /// The executable (producer) that grew; "allocated blocks" on a PyTorch run.
    pub executable: String,
    pub growth_bytes: i64,
    pub bytes_per_s: f64,
    /// Growth per execution of an executable (0 for driver memory and snapshots).
    pub per_execution: i64,
    /// What each step keeps, as the doctor's `growth_per_step_bytes` figure: per
    /// execution, or per repeating group of driver allocations; 0 for a snapshot's ramp.
    pub per_step: i64,
}

/// The reference a rise is compared with: the allocator's limit when sampled, else
/// twice the peak of all live framework memory.
fn reference(tl: &FrameworkTimeline) -> i64 {
    let peak = |s: i64| {
        tl.get(s)
            .map_or(0, |p| p.iter().map(|x| x.max).max().unwrap_or(0))
    };
    let limit = peak(series::LIMIT);
    if limit > 0 {
        limit
    } else {
        peak(series::LIVE_BUFFERS).max(peak(series::TORCH_ALLOCATED)) * 2
    }
}

/// A value series with its own and the program's steps per bucket, as the rule takes it.
fn samples(values: &[Point], own: Option<&[Point]>, program: Option<&[Point]>) -> Vec<Sample> {
    let count = |s: Option<&[Point]>, i: usize| s.and_then(|p| p.get(i)).map_or(0, |x| x.min);
    values
        .iter()
        .enumerate()
        .map(|(i, p)| Sample {
            t_ns: p.t_ns,
            bytes: p.last,
            own_steps: count(own, i),
            program_steps: count(program, i),
        })
        .collect()
}

/// Every producer with live outputs or executions, growing ones first, then by peak;
/// growing where the doctor's step rule found its outputs live after each step (`leaks`).
pub fn per_executable(tl: &FrameworkTimeline, leaks: &[ExecutionLeak]) -> Vec<ExecutableGrowth> {
    let mut out = Vec::new();
    for (idx, name) in tl.producers.iter().enumerate() {
        let idx = idx as i64;
        let live = tl.get(series::PRODUCER_LIVE + idx).unwrap_or(&[]);
        let execs = tl.get(series::PRODUCER_EXECS + idx);
        if live.is_empty() && execs.is_none() {
            continue;
        }
        let leak = leaks
            .iter()
            .filter(|l| l.executable == *name)
            .max_by_key(|l| l.leaked_bytes);
        out.push(ExecutableGrowth {
            name: name.clone(),
            executions: execs.map_or(0, |p| p.iter().map(|x| x.min).sum()),
            live_end: live.last().map_or(0, |p| p.last),
            live_peak: live.iter().map(|p| p.max).max().unwrap_or(0),
            growth_bytes: leak.map_or(0, |l| l.leaked_bytes as i64),
            per_execution: leak.map_or(0, |l| l.growth_per_step as i64),
            growing: leak.is_some(),
        });
    }
    out.sort_by(|x, y| {
        y.growing
            .cmp(&x.growing)
            .then(y.growth_bytes.cmp(&x.growth_bytes))
            .then(y.live_peak.cmp(&x.live_peak))
    });
    out
}

/// Whether the run keeps accumulating: the executable whose kept step outputs the
/// doctor's rule finds largest (`leaks`, the doctor's own choice), or, on a PyTorch
/// snapshot run, the allocated blocks (growth per second: a snapshot has no steps).
pub fn growing(tl: &FrameworkTimeline, leaks: &[ExecutionLeak]) -> Option<Growing> {
    if let Some(alloc) = tl.get(series::TORCH_ALLOCATED) {
        let r = ramp(&samples(alloc, None, None), reference(tl))?;
        return Some(Growing {
            executable: "allocated blocks".into(),
            growth_bytes: r.growth_bytes,
            bytes_per_s: r.bytes_per_s,
            per_execution: 0,
            per_step: 0,
        });
    }
    let mut top: Option<&ExecutionLeak> = None;
    for l in leaks {
        if top.is_none_or(|t| l.leaked_bytes > t.leaked_bytes) {
            top = Some(l);
        }
    }
    top.map(execution_growing)
}

/// A leaking executable as the run's growth: per second over its leaking steps.
fn execution_growing(l: &ExecutionLeak) -> Growing {
    let secs = l.last_step_ts.saturating_sub(l.first_step_ts).max(1) as f64 / 1e9;
    Growing {
        executable: l.executable.clone(),
        growth_bytes: l.leaked_bytes as i64,
        bytes_per_s: l.leaked_bytes as f64 / secs,
        per_execution: l.growth_per_step as i64,
        per_step: l.growth_per_step as i64,
    }
}

/// Growth of raw driver memory by the doctor's rule
/// (`memwatch_analysis::doctor::steps::growth_until`, the one `memwatch diagnose` and its
/// ledger apply): each process's device allocations live at `until` (monotonic ns: the
/// device's first failure, else the run's end), in time order; the largest growth of any
/// process, per second over its repeating run and per repeating group.
pub fn driver_growing(live: &[LiveAlloc], until: u64) -> Option<Growing> {
    let mut by_pid: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for a in live {
        by_pid.entry(a.pid).or_default().push((a.ts_ns, a.size));
    }
    by_pid
        .into_values()
        .filter_map(|mut v| {
            v.sort_unstable();
            growth_until(&v, until)
        })
        .max_by_key(|g| g.total)
        .map(|g| {
            let secs = g.ended_ts.saturating_sub(g.started_ts).max(1) as f64 / 1e9;
            Growing {
                executable: format!(
                    "driver memory ({} per repeating group of {} allocation{})",
                    crate::render::fmt::delta_bytes(g.per_group as i64),
                    g.period,
                    if g.period == 1 { "" } else { "s" }
                ),
                growth_bytes: g.total as i64,
                bytes_per_s: g.total as f64 / secs,
                per_execution: 0,
                per_step: g.per_group as i64,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(pid: u32, ts_ns: u64, size: u64) -> LiveAlloc {
        LiveAlloc {
            pid,
            tid: pid,
            ptr: ts_ns,
            size,
            ts_ns,
            api: 0,
            mem_kind: 0,
        }
    }

    #[test]
    fn a_driver_ramp_to_the_checkpoint_is_growth_and_a_held_setup_is_not() {
        let mib = 1u64 << 20;
        for (n, size, step) in [
            (60u64, 32 * mib, 100_000_000u64),
            (4442, 20 * mib, 2_000_000),
        ] {
            // One size over and over until the checkpoint, beside another process's
            // weights: growth, per repeating group of one allocation.
            let mut live: Vec<LiveAlloc> = (0..n).map(|i| alloc(7, i * step, size)).collect();
            live.push(alloc(8, 0, 10 << 30));
            let until = n * step;
            let g = driver_growing(&live, until).expect("a ramp to the checkpoint grows");
            assert_eq!(g.growth_bytes as u64, n * size);
            let per_s = size as f64 * 1e9 / step as f64;
            assert!((g.bytes_per_s - per_s).abs() / per_s < 0.05, "{g:?}");
            assert!(
                g.executable.contains("per repeating group of 1 allocation"),
                "{g:?}"
            );
            // The same allocations made at the start and held while the run goes on for
            // as long again: a setup, not growth.
            assert_eq!(driver_growing(&live, 2 * until), None);
        }
        // A group of three sizes repeated: growth wherever it stands.
        let live: Vec<LiveAlloc> = (0..12u64)
            .map(|i| alloc(3, i, [mib, 2 * mib, 3 * mib][i as usize % 3]))
            .collect();
        let g = driver_growing(&live, 1 << 40).expect("a repeating group");
        assert!(g.executable.contains("group of 3 allocations"), "{g:?}");
        assert_eq!(driver_growing(&[], 10), None);
    }
}
