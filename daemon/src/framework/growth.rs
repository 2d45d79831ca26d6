//! Growth and leaks from the framework view: per executable, its live outputs, its
//! executions and the growth per execution; and the one rule for "this run keeps
//! accumulating" (the overview's "growing" badge, the run page's growth table).
//! Pure: works on a whole-run [`FrameworkTimeline`] read at a coarse level.

use serde::Serialize;

use super::read::FrameworkTimeline;
use super::series;
use crate::render::Point;

/// Least growth that counts, whatever the run's size.
pub const MIN_GROWTH_BYTES: i64 = 16 << 20;
/// Buckets a whole-run read for growth aims at.
pub const GROWTH_POINTS: usize = 256;
/// Executions (PJRT) or rising buckets (PyTorch) a growth must span: a leak grows step
/// after step, a start-up fills its working set in a few.
pub const MIN_STEPS: i64 = 8;

/// One executable's (or other producer's) live outputs over the run.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExecutableGrowth {
    pub name: String,
    pub executions: i64,
    /// Live bytes it produced at the end of the run, and their maximum.
    pub live_end: i64,
    pub live_peak: i64,
    /// Its largest rise (see [`rising`]).
    pub growth_bytes: i64,
    /// `growth_bytes` per execution of it during the rise (0 without executions).
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

/// The largest rise of a value series: buckets `a < b` maximising `last[b] - last[a]`
/// such that at most one in four steps between them goes down. Returns (rise, a, b,
/// steps up).
pub fn rising(points: &[Point]) -> Option<(i64, usize, usize, i64)> {
    let n = points.len();
    // downs[i]: steps going down among the first i steps.
    let mut downs = vec![0usize; n.max(1)];
    let mut ups = vec![0i64; n.max(1)];
    for i in 1..n {
        downs[i] = downs[i - 1] + usize::from(points[i].last < points[i - 1].last);
        ups[i] = ups[i - 1] + i64::from(points[i].last > points[i - 1].last);
    }
    let mut best: Option<(i64, usize, usize, i64)> = None;
    for a in 0..n {
        for b in a + 1..n {
            let d = downs[b] - downs[a];
            if d * 4 > b - a {
                continue;
            }
            let g = points[b].last - points[a].last;
            if g > 0 && best.is_none_or(|x| g > x.0) {
                best = Some((g, a, b, ups[b] - ups[a]));
            }
        }
    }
    best
}

/// Whether a rise counts as growth: at least [`MIN_GROWTH_BYTES`] and `reference / 4`,
/// where the reference is the allocator's limit when sampled, else the peak of all live
/// framework memory. Filling a model's parameters at start-up is also a rise over many
/// executions of one executable; what tells a leak apart is that it eats the budget.
fn large(growth: i64, reference: i64) -> bool {
    growth >= MIN_GROWTH_BYTES.max(reference / 4)
}

/// The reference [`large`] compares a rise with.
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

fn executions_between(tl: &FrameworkTimeline, idx: i64, a: usize, b: usize) -> i64 {
    tl.get(series::PRODUCER_EXECS + idx).map_or(0, |p| {
        p.get(a + 1..=b.min(p.len().saturating_sub(1)))
            .map_or(0, |s| s.iter().map(|x| x.min).sum())
    })
}

/// Every producer with live outputs or executions, growing ones first, then by growth.
/// A producer grows when its live outputs rise by [`large`] amount over at least
/// [`MIN_STEPS`] of its own executions.
pub fn per_executable(tl: &FrameworkTimeline) -> Vec<ExecutableGrowth> {
    let mut out = Vec::new();
    let reference = reference(tl);
    for (idx, name) in tl.producers.iter().enumerate() {
        let idx = idx as i64;
        let live = tl.get(series::PRODUCER_LIVE + idx).unwrap_or(&[]);
        let execs = tl.get(series::PRODUCER_EXECS + idx);
        if live.is_empty() && execs.is_none() {
            continue;
        }
        let (growth, n_in, growing) = match rising(live) {
            Some((g, a, b, _)) => {
                let n_in = executions_between(tl, idx, a, b);
                (g, n_in, large(g, reference) && n_in >= MIN_STEPS)
            }
            None => (0, 0, false),
        };
        out.push(ExecutableGrowth {
            name: name.clone(),
            executions: execs.map_or(0, |p| p.iter().map(|x| x.min).sum()),
            live_end: live.last().map_or(0, |p| p.last),
            live_peak: live.iter().map(|p| p.max).max().unwrap_or(0),
            growth_bytes: growth,
            per_execution: if n_in > 0 { growth / n_in } else { 0 },
            growing,
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
/// [`per_executable`]). A PyTorch snapshot run has no executions to tell a leak from the
/// first fill of a training step's working set (the recorded real snapshots look the
/// same at any bucket size: a burst at the end of a mostly idle history), so it is never
/// called growing; its allocated series is on its page.
pub fn growing(tl: &FrameworkTimeline) -> Option<Growing> {
    let rate = |g: i64, a: usize, b: usize| {
        g as f64 / (((b - a).max(1) as u64 * tl.bucket_ns) as f64 / 1e9)
    };
    let top = per_executable(tl).into_iter().find(|e| e.growing)?;
    let idx = tl.producers.iter().position(|p| *p == top.name)? as i64;
    let (g, a, b, _) = rising(tl.get(series::PRODUCER_LIVE + idx)?)?;
    Some(Growing {
        executable: top.name,
        growth_bytes: g,
        bytes_per_s: rate(g, a, b),
        per_execution: top.per_execution,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[i64]) -> Vec<Point> {
        v.iter()
            .enumerate()
            .map(|(i, &x)| Point {
                t_ns: i as u64,
                min: x,
                max: x,
                last: x,
            })
            .collect()
    }

    #[test]
    fn a_leak_rises_and_a_steady_loop_does_not() {
        let mib = 1 << 20;
        // Start-up, then 64 MiB per step, then the OOM and the exit free everything.
        let mut leak: Vec<i64> = vec![0, 500 * mib];
        leak.extend((0..30).map(|i| 500 * mib + i * 64 * mib));
        leak.extend([0, 0, 0]);
        let (g, a, b, ups) = rising(&pts(&leak)).expect("leak");
        assert_eq!(g, 29 * 64 * mib + 500 * mib);
        assert_eq!((a, b, ups), (0, 31, 30));
        // A loop that allocates and frees the same working set, with jitter: its rises
        // are a few MiB at most.
        let steady: Vec<i64> = (0..40).map(|i| 2000 * mib + (i % 3) * 8 * mib).collect();
        let (g, _, _, _) = rising(&pts(&steady)).expect("some rise");
        assert!(!large(g, 4000 * mib), "{g}");
        // A sawtooth that goes down every other step has only short rises.
        let saw: Vec<i64> = (0..40)
            .map(|i| 1000 * mib + i * 4 * mib - (i % 2) * 300 * mib)
            .collect();
        let (g, _, _, _) = rising(&pts(&saw)).expect("some rise");
        assert!(g <= 310 * mib, "{g}");
        assert_eq!(rising(&pts(&[5, 4, 3])), None);
    }
}
