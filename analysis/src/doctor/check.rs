//! Checking a fix by replaying the run's own trace: the PJRT buffers of the failing
//! process and device (as they were created and released), each execution's temp buffer
//! for the time it ran, and the request that failed, through the BFC model
//! (`crate::alloc::bfc`) at a candidate pool size. The smallest pool that fits is found
//! with the replay engine's search; a suggested fraction is replayed once more to confirm
//! it.

use super::facts::PjrtFacts;
use crate::alloc::replay::{self, ReplayOptions};
use crate::alloc::trace::Trace;
use crate::alloc::{device, AllocatorKind, ModelSpec};

/// XLA rounds a BFC pool up to this (2 MiB).
pub const POOL_GRANULE: u64 = 2 << 20;

/// The run's trace up to a moment, ready to replay.
#[derive(Debug, Clone)]
pub struct RunTrace {
    pub trace: Trace,
    /// Buffers and temps replayed (the failed request not counted).
    pub buffers: usize,
}

/// Builds the trace of (pid, device) up to runtime ns `at`, with `requests` (the failed
/// allocation, or the buffers asked for together) last. Temps of executions that
/// completed before `at` are included; a failing execution's temp is the request itself.
pub fn run_trace(
    pjrt: &PjrtFacts,
    pid: u32,
    device: i32,
    at: u64,
    requests: &[u64],
) -> Option<RunTrace> {
    // (time, order: frees before allocations at one instant, id, size or None)
    let mut ops: Vec<(u64, u8, u64, Option<u64>)> = Vec::new();
    let mut id = 0u64;
    for b in pjrt
        .buffers
        .iter()
        .filter(|b| b.pid == pid && b.device == device)
    {
        if b.created > at || b.size == 0 {
            continue;
        }
        ops.push((b.created, 1, id, Some(b.size)));
        if let Some(f) = b.freed.filter(|f| *f <= at) {
            ops.push((f, 0, id, None));
        }
        id += 1;
    }
    // Each executable's temp, looked up once per handle (the first record of a handle,
    // as `PjrtFacts::executable` finds it), not once per execution.
    let mut temps: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for e in pjrt.executables.iter().filter(|e| e.pid == pid) {
        temps
            .entry(e.handle)
            .or_insert_with(|| e.stat(e.stats.temp).unwrap_or(0));
    }
    for x in pjrt
        .executions
        .iter()
        .filter(|x| x.pid == pid && x.device == device && x.ok && x.end <= at)
    {
        let temp = temps.get(&x.handle).copied().unwrap_or(0);
        if temp > 0 {
            ops.push((x.ts, 1, id, Some(temp)));
            ops.push((x.end, 0, id, None));
            id += 1;
        }
    }
    let buffers = id as usize;
    ops.sort_by_key(|o| (o.0, o.1));
    let mut pairs: Vec<(u64, Option<u64>)> = ops.into_iter().map(|o| (o.2, o.3)).collect();
    for (k, r) in requests.iter().filter(|r| **r > 0).enumerate() {
        pairs.push((id + k as u64, Some(*r)));
    }
    if pairs.is_empty() {
        return None;
    }
    Trace::from_pairs(pairs)
        .ok()
        .map(|trace| RunTrace { trace, buffers })
}

fn bfc(limit: u64) -> ModelSpec {
    ModelSpec {
        kind: AllocatorKind::Bfc,
        limit,
        preallocate: true,
        granularity: device::DEFAULT_GRANULARITY,
        device_free_bytes: None,
    }
}

/// The smallest preallocated BFC pool (to [`POOL_GRANULE`]) that fits the trace, up to
/// `max_pool`; `None` when none does.
pub fn min_pool(t: &RunTrace, max_pool: u64) -> Option<u64> {
    let found = replay::find_min_limit(&t.trace, &bfc, POOL_GRANULE, max_pool, &mut |_, _| {})
        .ok()
        .flatten()?;
    Some(found.min_pool_bytes.div_ceil(POOL_GRANULE) * POOL_GRANULE)
}

/// Whether the trace fits a preallocated BFC pool of `pool` bytes.
pub fn fits(t: &RunTrace, pool: u64) -> bool {
    replay::replay_spec(
        &t.trace,
        &bfc(pool),
        ReplayOptions {
            stop_at_oom: true,
            ..Default::default()
        },
        &mut |_| {},
    )
    .is_ok_and(|r| r.fits)
}

/// The pool XLA builds from `fraction` of `total` (rounded up to 2 MiB).
pub fn pool_of_fraction(fraction: f64, total: u64) -> u64 {
    ((fraction * total as f64) as u64).div_ceil(POOL_GRANULE) * POOL_GRANULE
}

/// The smallest fraction with two decimals whose pool holds `pool` bytes, if one at
/// most 0.95 does.
pub fn fraction_for(pool: u64, total: u64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    // XLA rounds the pool up to 2 MiB, so a fraction just below the ratio may hold it.
    let mut hundredths = ((pool as f64 / total as f64) * 100.0).floor().max(1.0) as u64;
    while pool_of_fraction(hundredths as f64 / 100.0, total) < pool {
        hundredths += 1;
    }
    (hundredths <= 95).then_some(hundredths as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_like_xla() {
        // XLA's own pools on the H100 of the corpus (85017493504 B).
        let total = 85017493504;
        assert_eq!(pool_of_fraction(0.05, total), 4250927104);
        assert_eq!(pool_of_fraction(0.04, total), 3401580544);
        assert_eq!(pool_of_fraction(0.75, total), 63763906560);
        assert_eq!(fraction_for(4250927104, total), Some(0.05));
        assert_eq!(fraction_for(4250927105, total), Some(0.06));
        assert_eq!(fraction_for(total, total), None);
    }

    #[test]
    fn min_pool_of_a_trace() {
        let t = RunTrace {
            trace: Trace::from_pairs([(0, Some(3 << 20)), (1, Some(5 << 20))]).unwrap(),
            buffers: 1,
        };
        let p = min_pool(&t, 1 << 30).unwrap();
        assert!((8 << 20..=10 << 20).contains(&p), "{p}");
        assert!(fits(&t, p));
        assert!(!fits(&t, 6 << 20));
    }
}
