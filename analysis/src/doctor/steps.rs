//! Growth step after step: the evidence a leak needs. Two sources: the PJRT executions of
//! an executable whose outputs outlive their step (an XLA program's steps are its
//! executions), and, without PJRT records, a repeating group of driver allocations that
//! are never released (a framework allocator's segments: one group per training step).

use super::facts::{PjrtFacts, Producer};
use std::collections::BTreeMap;

/// An executable whose outputs accumulate, one step after another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionLeak {
    pub executable: String,
    /// Successful executions (the program's steps) before the moment examined.
    pub steps: usize,
    /// The first step (0-based execution index) of the unbroken run of steps whose
    /// outputs are still live.
    pub first_step: usize,
    /// Steps in that run.
    pub leaked_steps: usize,
    /// Bytes each step leaves live (the most common figure in the run).
    pub growth_per_step: u64,
    /// Bytes live from those steps.
    pub leaked_bytes: u64,
    /// Runtime ns of the first leaking step and of the last step of the run.
    pub first_step_ts: u64,
    pub last_step_ts: u64,
}

/// Steps needed before growth counts as a leak.
pub const MIN_LEAKED_STEPS: usize = 3;

/// Finds the executable of (pid, device) whose step outputs are live at runtime ns
/// `at`: for each executable (by name), its successful executions before `at` in order;
/// an execution leaks when one of its outputs is still live. The last execution is left
/// out (its outputs are the program's current state); the unbroken run of leaking
/// executions before it must be [`MIN_LEAKED_STEPS`] long.
pub fn execution_leak(pjrt: &PjrtFacts, pid: u32, device: i32, at: u64) -> Option<ExecutionLeak> {
    let mut best: Option<ExecutionLeak> = None;
    for cand in execution_leaks(pjrt, pid, device, at) {
        if best
            .as_ref()
            .is_none_or(|b| cand.leaked_bytes > b.leaked_bytes)
        {
            best = Some(cand);
        }
    }
    best
}

/// Every executable of (pid, device) whose step outputs are live at runtime ns `at`, by
/// the rule of [`execution_leak`] (which takes the one that keeps the most), in name
/// order.
pub fn execution_leaks(pjrt: &PjrtFacts, pid: u32, device: i32, at: u64) -> Vec<ExecutionLeak> {
    // execution index -> live output bytes at `at`
    let mut survivors: BTreeMap<usize, u64> = BTreeMap::new();
    for b in pjrt.live_at(pid, device, at) {
        if let Producer::Execution(i) = b.producer {
            *survivors.entry(i).or_default() += b.size;
        }
    }
    let mut by_name: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    // Each handle named once, not once per execution.
    let mut names: std::collections::HashMap<u64, String> = std::collections::HashMap::new();
    for (i, x) in pjrt.executions.iter().enumerate() {
        if x.pid == pid && x.device == device && x.ok && x.ts <= at {
            let name = names
                .entry(x.handle)
                .or_insert_with(|| pjrt.name(pid, x.handle));
            match by_name.get_mut(name.as_str()) {
                Some(v) => v.push(i),
                None => {
                    by_name.insert(name.clone(), vec![i]);
                }
            }
        }
    }
    let mut out = Vec::new();
    for (name, execs) in by_name {
        let n = execs.len();
        if n < MIN_LEAKED_STEPS + 1 {
            continue;
        }
        let live = |k: usize| survivors.get(&execs[k]).copied().unwrap_or(0);
        // The run of steps before the last whose outputs are still live, back to the first
        // of them; a step here and there whose outputs the capture did not tie to it (at
        // most one in twenty) does not break it, three in a row do.
        let mut start = n - 1;
        let (mut dead, mut dead_run) = (0usize, 0usize);
        for k in (0..n - 1).rev() {
            if live(k) > 0 {
                dead_run = 0;
                if dead * 20 <= n - 1 - k {
                    start = k;
                }
            } else {
                dead += 1;
                dead_run += 1;
                if dead_run >= 3 || dead * 20 > n - 1 - k + 20 {
                    break;
                }
            }
        }
        let leaked_steps = (start..n - 1).filter(|k| live(*k) > 0).count();
        if leaked_steps < MIN_LEAKED_STEPS {
            continue;
        }
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        let mut leaked = 0u64;
        for k in (start..n - 1).filter(|k| live(*k) > 0) {
            *counts.entry(live(k)).or_default() += 1;
            leaked += live(k);
        }
        let growth = counts
            .iter()
            .max_by_key(|(size, c)| (**c, **size))
            .map_or(0, |(s, _)| *s);
        out.push(ExecutionLeak {
            executable: name,
            steps: n,
            first_step: start,
            leaked_steps,
            growth_per_step: growth,
            leaked_bytes: leaked,
            first_step_ts: pjrt.executions[execs[start]].ts,
            last_step_ts: pjrt.executions[execs[n - 1]].ts,
        });
    }
    out
}

/// Allocations that repeat in a fixed group and are never released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationGrowth {
    /// Allocations per group (1: the same size over and over).
    pub period: usize,
    /// Whole groups seen.
    pub repetitions: usize,
    /// Bytes per group.
    pub per_group: u64,
    /// Bytes in the repeating run.
    pub total: u64,
    /// Raw ns of the run's first allocation.
    pub started_ts: u64,
    /// Raw ns of the run's last allocation.
    pub ended_ts: u64,
}

/// Finds the longest run at the end of `live` (allocations live at one moment, in time
/// order: (raw ns, size)) whose sizes repeat with a period of 1 to 8 allocations, at
/// least three times; the smallest period that covers the most.
pub fn allocation_growth(live: &[(u64, u64)]) -> Option<AllocationGrowth> {
    let n = live.len();
    let mut best: Option<(usize, usize)> = None; // (period, run length)
    for p in 1..=8usize.min(n / 3) {
        let mut j = n - 1;
        while j >= p && live[j].1 == live[j - p].1 {
            j -= 1;
        }
        // Elements j+1-p ..= n-1 follow the period (the first p are its first group).
        let len = n - (j + 1) + p;
        let len = len.min(n);
        if len / p >= 3 && best.is_none_or(|(_, l)| len > l) {
            best = Some((p, len));
        }
    }
    let (p, len) = best?;
    let run = &live[n - len..];
    let reps = len / p;
    let per_group: u64 = run[len - reps * p..len - reps * p + p]
        .iter()
        .map(|a| a.1)
        .sum();
    Some(AllocationGrowth {
        period: p,
        repetitions: reps,
        per_group,
        total: run.iter().map(|a| a.1).sum(),
        started_ts: run[0].0,
        ended_ts: run[len - 1].0,
    })
}

/// Repeats of one allocation size that count as a ramp (a period of one).
pub const MIN_RAMP_REPETITIONS: usize = 32;

/// The one growth rule (the doctor's leaks, the ledger's and the dashboard's trends):
/// allocations live at `until` (raw ns) that repeat in a fixed group and were never
/// released, growing up to `until`. A group of ≥ 2 allocations repeated ≥ 3 times is
/// growth wherever it stands; one size over and over is growth only as a ramp that goes
/// on until `until` — ≥ [`MIN_RAMP_REPETITIONS`] of them, spread over time, holding at
/// least half of what is live, the last no further from `until` than four of the ramp's
/// own intervals or a quarter of its span. A load at the start followed by other work is not a ramp (its last
/// allocation is far from `until`), nor are a few arrays of one size kept on purpose.
pub fn growth_until(live: &[(u64, u64)], until: u64) -> Option<AllocationGrowth> {
    let g = allocation_growth(live)?;
    if g.period >= 2 {
        return Some(g);
    }
    let span = g.ended_ts.saturating_sub(g.started_ts);
    let reps = g.repetitions as u64;
    let live_bytes: u64 = live.iter().map(|a| a.1).sum();
    if g.repetitions < MIN_RAMP_REPETITIONS || span == 0 || g.total.saturating_mul(2) < live_bytes {
        return None;
    }
    reaches(g.started_ts, g.ended_ts, reps, until).then_some(g)
}

/// Whether growth made in `steps` steps from `started` to `ended` goes on until `until`:
/// the last step no further from it than four of the growth's own intervals or a quarter
/// of its span (the failing request comes after the framework's own retry: freeing its
/// cache, collecting garbage). A load at the start followed by other work does not.
pub fn reaches(started: u64, ended: u64, steps: u64, until: u64) -> bool {
    let span = ended.saturating_sub(started);
    let interval = span / steps.saturating_sub(1).max(1);
    let gap = until.saturating_sub(ended);
    gap <= interval.saturating_mul(4).max(span / 4)
}

impl ExecutionLeak {
    /// Whether its steps go on until `at` ([`reaches`]): kept outputs of a loop still
    /// running, not a setup (weights made by one executable in a loop and kept) followed
    /// by other work.
    pub fn reaches(&self, at: u64) -> bool {
        let steps = self.steps.saturating_sub(self.first_step) as u64;
        reaches(self.first_step_ts, self.last_step_ts, steps, at)
    }
}

/// The longest step a loop is looked for in (allocations per step).
pub const MAX_STEP_ALLOCATIONS: usize = 4096;

/// The steps of a loop in a sequence of allocations (`keys`: what identifies an
/// allocation, e.g. its call stack and size): the period of 1 to
/// [`MAX_STEP_ALLOCATIONS`] allocations that the end of the sequence repeats over the
/// longest run (the shortest of equals), at least [`MIN_LEAKED_STEPS`] + 1 times.
/// Returns the index of each step's first allocation, in order (the last step may be one
/// the sequence ends inside, e.g. the step that failed). A period of one allocation is
/// no loop: one size allocated over and over is what loading data looks like too.
pub fn loop_steps<K: PartialEq>(keys: &[K]) -> Option<Vec<usize>> {
    let n = keys.len();
    // The period and the first index of its run.
    let mut best: Option<(usize, usize)> = None;
    // Where the run of one repeated key at the end starts: inside it every period
    // matches, so each period's scan starts at its edge (a long run of one size costs
    // one pass, not one per period).
    let mut same_from = n;
    while same_from > 1 && keys[same_from - 2] == keys[n - 1] {
        same_from -= 1;
    }
    let same_from = same_from.saturating_sub(1);
    for p in 1..=MAX_STEP_ALLOCATIONS.min(n / (MIN_LEAKED_STEPS + 1)) {
        let mut j = (same_from + p)
            .saturating_sub(1)
            .min(n - 1)
            .max(p.min(n - 1));
        while j >= p && keys[j] == keys[j - p] {
            j -= 1;
        }
        let start = j + 1 - p;
        if (n - start) / p > MIN_LEAKED_STEPS && best.is_none_or(|(_, s)| start < s) {
            best = Some((p, start));
        }
    }
    let (p, start) = best.filter(|(p, _)| *p >= 2)?;
    Some((start..n).step_by(p).collect())
}

/// Growth step after step as a framework states it (allocated bytes after each step, from
/// a source that knows steps, e.g. a PyTorch snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepGrowth {
    /// Bytes each step added (all steps of the run added exactly this).
    pub growth_per_step: u64,
    /// The first step whose memory stayed (0-based).
    pub first_step: usize,
    /// Steps recorded.
    pub steps: usize,
    /// Bytes the run of growing steps added.
    pub leaked_bytes: u64,
}

/// The unbroken run of equal, positive growth at the end of `allocated` (allocated bytes
/// after each step), at least [`MIN_LEAKED_STEPS`] steps long.
pub fn step_growth(allocated: &[u64]) -> Option<StepGrowth> {
    let n = allocated.len();
    if n < MIN_LEAKED_STEPS + 1 {
        return None;
    }
    let delta = |k: usize| allocated[k].checked_sub(allocated[k - 1]);
    let g = delta(n - 1).filter(|g| *g > 0)?;
    let mut s = n - 1;
    while s > 1 && delta(s - 1) == Some(g) {
        s -= 1;
    }
    let grew = n - s;
    (grew >= MIN_LEAKED_STEPS).then(|| StepGrowth {
        growth_per_step: g,
        first_step: s - 1,
        steps: n,
        leaked_bytes: g * grew as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(sizes: &[u64]) -> Vec<(u64, u64)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (i as u64, *s))
            .collect()
    }

    /// torch_leak's own figures (figures.json: memory_allocated() after each step).
    #[test]
    fn growth_a_framework_states() {
        let a: Vec<u64> = (0..29u64).map(|k| 235946496 + k * 134218240).collect();
        let g = step_growth(&a).unwrap();
        assert_eq!(
            (g.growth_per_step, g.first_step, g.steps),
            (134218240, 0, 29)
        );
        // steady for ten steps, then growing
        let mut b = vec![100u64; 10];
        b.extend((1..=5).map(|k| 100 + k * 7));
        let g = step_growth(&b).unwrap();
        assert_eq!((g.growth_per_step, g.first_step, g.steps), (7, 9, 15));
        assert_eq!(step_growth(&[1, 2, 3]), None);
        assert_eq!(step_growth(&[5, 5, 5, 5, 5]), None);
    }

    #[test]
    fn repeating_groups() {
        // warm-up, then [32, 32, 64] eight times, then the first of the next group
        let mut s = vec![16, 2, 16, 1];
        for _ in 0..8 {
            s.extend([32, 32, 64]);
        }
        s.push(32);
        let g = allocation_growth(&seq(&s)).unwrap();
        assert_eq!((g.period, g.repetitions, g.per_group), (3, 8, 128));
        assert_eq!(g.started_ts, 4);
        // one size kept over and over
        let g = allocation_growth(&seq(&[5, 7, 7, 7, 7, 7])).unwrap();
        assert_eq!(
            (g.period, g.repetitions, g.per_group, g.total),
            (1, 5, 7, 35)
        );
        // no repetition
        assert_eq!(allocation_growth(&seq(&[1, 2, 3, 4, 5, 6, 7])), None);
        assert_eq!(allocation_growth(&seq(&[1, 1])), None);
    }

    /// Allocations `(ts, size)` of `sizes` repeated `reps` times, one every `dt` ns from
    /// `t0`.
    fn ramp(t0: u64, dt: u64, sizes: &[u64], reps: usize) -> Vec<(u64, u64)> {
        (0..reps)
            .flat_map(|_| sizes.iter().copied())
            .enumerate()
            .map(|(i, s)| (t0 + i as u64 * dt, s))
            .collect()
    }

    /// The one growth rule on generated runs: periods one to three, sizes from 2 MiB to
    /// 96 MiB, ramps that go on to the moment and loads that stop long before it.
    #[test]
    fn growth_until_the_moment() {
        const MIB: u64 = 1 << 20;
        for sizes in [
            vec![32 * MIB],
            vec![2 * MIB],
            vec![96 * MIB],
            vec![8 * MIB, 32 * MIB],
            vec![16 * MIB, 64 * MIB, 8 * MIB],
        ] {
            for reps in [40usize, 300, 4442] {
                let dt = 1_000_000; // 1 ms
                                    // set-up allocations first (weights), then the ramp
                let per: u64 = sizes.iter().sum();
                let mut live = vec![(0, 10 * per + 5 * MIB), (10, 3 * MIB)];
                live.extend(ramp(1_000, dt, &sizes, reps));
                let last = live.last().unwrap().0;
                let g = growth_until(&live, last + dt).unwrap_or_else(|| {
                    panic!("{sizes:?} x {reps}: {:?}", allocation_growth(&live))
                });
                assert_eq!(g.period, sizes.len(), "{sizes:?} x {reps}");
                assert_eq!(g.per_group, sizes.iter().sum::<u64>());
                assert!(g.repetitions >= reps - 1, "{} of {reps}", g.repetitions);
                // The same allocations as a load that ended long before the moment: one
                // size is no ramp then; a repeating group of several still is growth.
                let late = last + 1_000 * dt * reps as u64;
                assert_eq!(growth_until(&live, late).is_some(), sizes.len() >= 2);
            }
        }
        // Too few of one size (arrays kept on purpose): not a ramp.
        let live = ramp(0, 1_000, &[96 * MIB], MIN_RAMP_REPETITIONS - 1);
        assert_eq!(growth_until(&live, live.last().unwrap().0 + 1), None);
        // A ramp holding less than half of what is live (a large model beside it): not
        // the growth that filled the device.
        let mut live = vec![(0, 40 << 30)];
        live.extend(ramp(10, 1_000, &[32 * MIB], 100));
        assert_eq!(growth_until(&live, live.last().unwrap().0 + 1), None);
    }

    #[test]
    fn loop_steps_in_allocation_sequences() {
        // set-up, then [a, b, c] five times, then the failing step's first two
        let mut k = vec![9, 8];
        for _ in 0..5 {
            k.extend([1, 2, 3]);
        }
        k.extend([1, 2]);
        assert_eq!(loop_steps(&k), Some(vec![2, 5, 8, 11, 14, 17]));
        // one allocation over and over (any period fits it): no loop
        assert_eq!(loop_steps(&[4; 40]), None);
        // a period that repeats only three times is not enough
        assert_eq!(loop_steps(&[1, 2, 1, 2, 1, 2, 7]), None);
        assert_eq!(loop_steps::<u8>(&[]), None);
        // a long run of one size after a loop: still no loop, and quickly
        let mut k: Vec<u32> = (0..6).flat_map(|_| [1, 2, 3]).collect();
        k.extend(std::iter::repeat_n(9, 2_000_000));
        assert_eq!(loop_steps(&k), None);
        // a loop whose steps end in a repeated size
        let mut k = vec![7];
        for _ in 0..5 {
            k.extend([1, 4, 4, 4]);
        }
        assert_eq!(loop_steps(&k), Some(vec![1, 5, 9, 13, 17]));
    }
}
