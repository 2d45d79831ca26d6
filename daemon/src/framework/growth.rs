//! Growth and leaks from the framework view and the driver's series: per executable, its
//! live outputs, its executions and the growth per execution; a PyTorch snapshot's
//! allocated blocks and a device's raw live bytes per second. The rule itself is
//! `memwatch_analysis::growth::ramp` (the overview's "growing" badge, the run page's
//! growth table). Pure: works on whole-run series read at a coarse level.

use serde::Serialize;

use memwatch_analysis::growth::{ramp, Sample};

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
    /// Its growth by the one rule (`memwatch_analysis::growth::ramp`); 0 when it does
    /// not keep growing.
    pub growth_bytes: i64,
    /// `growth_bytes` per execution of it during the growth (0 without).
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
    pub per_execution: i64,
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

/// Every producer with live outputs or executions, growing ones first, then by peak.
pub fn per_executable(tl: &FrameworkTimeline) -> Vec<ExecutableGrowth> {
    let mut out = Vec::new();
    let reference = reference(tl);
    let program = tl.get(series::EXECUTIONS);
    for (idx, name) in tl.producers.iter().enumerate() {
        let idx = idx as i64;
        let live = tl.get(series::PRODUCER_LIVE + idx).unwrap_or(&[]);
        let execs = tl.get(series::PRODUCER_EXECS + idx);
        if live.is_empty() && execs.is_none() {
            continue;
        }
        // An executable without executions (host transfers) has no steps of its own.
        let r = execs.and_then(|e| ramp(&samples(live, Some(e), program), reference));
        out.push(ExecutableGrowth {
            name: name.clone(),
            executions: execs.map_or(0, |p| p.iter().map(|x| x.min).sum()),
            live_end: live.last().map_or(0, |p| p.last),
            live_peak: live.iter().map(|p| p.max).max().unwrap_or(0),
            growth_bytes: r.as_ref().map_or(0, |r| r.growth_bytes),
            per_execution: r.as_ref().and_then(|r| r.per_step).unwrap_or(0),
            growing: r.is_some(),
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

/// Whether the run keeps accumulating: an executable that grows (see
/// [`per_executable`]), or, on a PyTorch snapshot run, the allocated blocks (growth per
/// second: a snapshot has no steps).
pub fn growing(tl: &FrameworkTimeline) -> Option<Growing> {
    if let Some(alloc) = tl.get(series::TORCH_ALLOCATED) {
        let r = ramp(&samples(alloc, None, None), reference(tl))?;
        return Some(Growing {
            executable: "allocated blocks".into(),
            growth_bytes: r.growth_bytes,
            bytes_per_s: r.bytes_per_s,
            per_execution: 0,
        });
    }
    let reference = reference(tl);
    let program = tl.get(series::EXECUTIONS);
    let top = per_executable(tl).into_iter().find(|e| e.growing)?;
    let idx = tl.producers.iter().position(|p| *p == top.name)? as i64;
    let r = ramp(
        &samples(
            tl.get(series::PRODUCER_LIVE + idx)?,
            tl.get(series::PRODUCER_EXECS + idx),
            program,
        ),
        reference,
    )?;
    Some(Growing {
        executable: top.name,
        growth_bytes: r.growth_bytes,
        bytes_per_s: r.bytes_per_s,
        per_execution: top.per_execution,
    })
}

/// Growth of raw driver memory (a device's live bytes, no steps): growth per second by
/// the same rule, against twice the series' peak.
pub fn driver_growing(points: &[Point]) -> Option<Growing> {
    let peak = points.iter().map(|p| p.max).max().unwrap_or(0);
    let r = ramp(&samples(points, None, None), peak * 2)?;
    Some(Growing {
        executable: "driver memory".into(),
        growth_bytes: r.growth_bytes,
        bytes_per_s: r.bytes_per_s,
        per_execution: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_ramp_is_growth_and_a_held_setup_is_not() {
        let mib = 1 << 20;
        let ramp_pts: Vec<Point> = (0..60)
            .map(|i| Point {
                t_ns: i * 100_000_000,
                min: i as i64 * 32 * mib,
                max: i as i64 * 32 * mib,
                last: i as i64 * 32 * mib,
            })
            .collect();
        let g = driver_growing(&ramp_pts).expect("a ramp to the end grows");
        assert!((g.bytes_per_s - 320.0 * mib as f64).abs() < 1.0);
        let held: Vec<Point> = (0..60)
            .map(|i| {
                let v = (i.min(10) as i64) * 100 * mib;
                Point {
                    t_ns: i * 100_000_000,
                    min: v,
                    max: v,
                    last: v,
                }
            })
            .collect();
        assert_eq!(driver_growing(&held), None);
    }
}
