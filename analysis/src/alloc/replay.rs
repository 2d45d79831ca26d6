//! Replaying a trace through an allocator model, and searching the smallest pool that
//! fits.
//!
//! Owns the replay loop (live set by slot, statistics after every event, the first
//! out-of-memory with its live set and fragmentation) and the capacity search. An event
//! that fails is recorded and the replay goes on (its buffer never becomes live and its
//! later free is skipped), so `steps` has one entry per trace event. It does not read
//! files or print.

use super::trace::{Trace, TraceOp};
use super::{build, AllocatorModel, Block, ModelSpec};

/// Statistics after one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    pub bytes_in_use: u64,
    pub largest_free_block_bytes: u64,
}

/// A buffer live at the moment of a failure.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LiveBuffer {
    /// The trace's id of the buffer.
    pub id: u64,
    /// Bytes requested.
    pub size: u64,
    /// Bytes the allocator gave it (after rounding / not splitting).
    pub allocated: u64,
    pub tag: Option<String>,
}

/// The first failing event and the allocator's state at that moment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Oom {
    /// Index of the event in the trace (0-based).
    pub index: usize,
    /// The trace's id of the buffer that could not be allocated.
    pub id: u64,
    /// Bytes requested.
    pub size: u64,
    pub tag: Option<String>,
    pub bytes_in_use: u64,
    /// Bytes held from the device.
    pub pool_bytes: u64,
    /// The pool limit.
    pub limit: u64,
    /// Free bytes inside the pool (held but unused).
    pub free_in_pool_bytes: u64,
    /// Bytes the pool may still take from the device.
    pub unallocated_bytes: u64,
    /// The largest block that could have served a request.
    pub largest_free_block_bytes: u64,
    /// Live buffers, largest first.
    pub live: Vec<LiveBuffer>,
    /// The pool's blocks in address order (empty for models without a layout).
    #[serde(skip)]
    pub blocks: Vec<Block>,
}

/// The outcome of one replay.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReplayResult {
    pub allocator: &'static str,
    pub fits: bool,
    pub oom_step: Option<usize>,
    /// How many allocations failed in total.
    pub failed_allocs: usize,
    pub peak_bytes_in_use: u64,
    /// Most bytes held from the device at once.
    pub peak_pool_bytes: u64,
    /// The pool limit (capacity × memory fraction).
    pub limit: u64,
    pub events: usize,
    /// One per event, when asked for.
    pub steps: Option<Vec<Step>>,
    pub oom: Option<Oom>,
}

/// Replay knobs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// Record statistics after every event.
    pub record_steps: bool,
    /// Stop at the first failure (capacity search).
    pub stop_at_oom: bool,
    /// Check the model's invariants after every event (tests).
    pub check_invariants: bool,
}

/// How often the progress callback is called, in events.
pub const PROGRESS_EVERY: usize = 1 << 16;

/// Replays `trace` through `model`. `progress` gets the number of events done, every
/// [`PROGRESS_EVERY`] events and at the end.
pub fn replay(
    trace: &Trace,
    model: &mut dyn AllocatorModel,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<ReplayResult, super::ModelError> {
    const NONE: u32 = u32::MAX;
    const ZERO: u32 = u32::MAX - 1;
    let mut handles = vec![NONE; trace.slots()];
    let mut steps = if opts.record_steps {
        Some(Vec::with_capacity(trace.len()))
    } else {
        None
    };
    let mut peak_in_use = 0u64;
    let mut peak_pool = 0u64;
    let mut oom: Option<Oom> = None;
    let mut failed = 0usize;
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            TraceOp::Alloc { slot, size } => {
                if size == 0 {
                    handles[slot as usize] = ZERO;
                } else if let Some(h) = model.alloc(size) {
                    handles[slot as usize] = h;
                } else {
                    failed += 1;
                    if oom.is_none() {
                        oom = Some(describe_oom(trace, model, &handles, i, slot, size));
                    }
                    if opts.stop_at_oom {
                        break;
                    }
                }
            }
            TraceOp::Free { slot } => {
                let h = std::mem::replace(&mut handles[slot as usize], NONE);
                if h != NONE && h != ZERO {
                    model.free(h);
                }
            }
        }
        let in_use = model.bytes_in_use();
        peak_in_use = peak_in_use.max(in_use);
        peak_pool = peak_pool.max(model.pool_bytes());
        if let Some(s) = steps.as_mut() {
            s.push(Step {
                bytes_in_use: in_use,
                largest_free_block_bytes: model.largest_free_block(),
            });
        }
        if opts.check_invariants {
            model.check_invariants()?;
        }
        if i % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
            progress(i + 1);
        }
    }
    progress(trace.len());
    Ok(ReplayResult {
        allocator: model.name(),
        fits: oom.is_none(),
        oom_step: oom.as_ref().map(|o| o.index),
        failed_allocs: failed,
        peak_bytes_in_use: peak_in_use,
        peak_pool_bytes: peak_pool,
        limit: model.limit(),
        events: trace.len(),
        steps,
        oom,
    })
}

fn describe_oom(
    trace: &Trace,
    model: &dyn AllocatorModel,
    handles: &[u32],
    index: usize,
    slot: u32,
    size: u64,
) -> Oom {
    // Which allocation (number, size) occupies each slot at `index`.
    let mut owner = vec![(0usize, 0u64); trace.slots()];
    let mut n = 0usize;
    for op in &trace.ops[..index] {
        if let TraceOp::Alloc { slot, size } = *op {
            owner[slot as usize] = (n, size);
            n += 1;
        }
    }
    let mut live: Vec<LiveBuffer> = Vec::new();
    for (s, &h) in handles.iter().enumerate() {
        if h < u32::MAX - 1 && s != slot as usize {
            let (k, sz) = owner[s];
            live.push(LiveBuffer {
                id: trace.alloc_ids[k],
                size: sz,
                allocated: model.allocated_size(h),
                tag: trace.tag(k).map(str::to_string),
            });
        }
    }
    live.sort_by(|a, b| b.allocated.cmp(&a.allocated).then(a.id.cmp(&b.id)));
    let pool = model.pool_bytes();
    let in_use = model.bytes_in_use();
    Oom {
        index,
        id: trace.alloc_ids[n],
        size,
        tag: trace.tag(n).map(str::to_string),
        bytes_in_use: in_use,
        pool_bytes: pool,
        limit: model.limit(),
        free_in_pool_bytes: pool.saturating_sub(in_use),
        unallocated_bytes: model.limit().saturating_sub(pool),
        largest_free_block_bytes: model.largest_free_block(),
        live,
        blocks: model.blocks(),
    }
}

/// Replays with a fresh model built from `spec`.
pub fn replay_spec(
    trace: &Trace,
    spec: &ModelSpec,
    opts: ReplayOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<ReplayResult, super::ModelError> {
    let mut model = build(spec);
    replay(trace, model.as_mut(), opts, progress)
}

/// The most bytes the trace ever has live (unrounded): no allocator fits below it.
pub fn peak_live_bytes(trace: &Trace) -> u64 {
    let mut sizes = vec![0u64; trace.slots()];
    let (mut live, mut peak) = (0u64, 0u64);
    for op in &trace.ops {
        match *op {
            TraceOp::Alloc { slot, size } => {
                sizes[slot as usize] = size;
                live = live.saturating_add(size);
                peak = peak.max(live);
            }
            TraceOp::Free { slot } => live = live.saturating_sub(sizes[slot as usize]),
        }
    }
    peak
}

/// Result of a capacity search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MinCapacity {
    /// Smallest pool limit found that fits (within `resolution`).
    pub min_pool_bytes: u64,
    /// Replays run.
    pub replays: usize,
    /// Search resolution in bytes.
    pub resolution: u64,
    /// The model proved the minimum from a fitting run (checked by replays at it and 256
    /// bytes below); otherwise a bisection to `resolution`.
    pub exact: bool,
}

/// Searches the smallest pool limit for which the trace fits. Models that can prove
/// their minimum from one fitting run ([`AllocatorModel::exact_min_limit`]) answer
/// exactly; the others get an exponential search up from the peak live bytes, then
/// bisection to `resolution`. Allocators are not
/// perfectly monotonic in their limit (fragmentation can differ), so the answer is a
/// limit that was verified to fit and whose predecessor by `resolution` did not, within
/// the bracket the search saw. `make_spec(limit)` builds the model for a limit;
/// `progress` gets (replays done, events of the current replay).
pub fn find_min_limit(
    trace: &Trace,
    make_spec: &dyn Fn(u64) -> ModelSpec,
    resolution: u64,
    max_limit: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Option<MinCapacity>, super::ModelError> {
    let resolution = resolution.max(256);
    let opts = ReplayOptions {
        stop_at_oom: true,
        ..Default::default()
    };
    let mut replays = 0usize;
    // One replay; returns whether it fit and the model's exact minimum, if any.
    let mut probe =
        |limit: u64, replays: &mut usize| -> Result<(bool, Option<u64>), super::ModelError> {
            *replays += 1;
            let n = *replays;
            let mut model = build(&make_spec(limit));
            let r = replay(trace, model.as_mut(), opts, &mut |e| progress(n, e))?;
            Ok((
                r.fits,
                if r.fits {
                    model.exact_min_limit()
                } else {
                    None
                },
            ))
        };
    // Models that can name their exact minimum from one fitting run need three replays:
    // one at the maximum, and a check at the minimum and just below it.
    let (fits_max, hint) = probe(max_limit, &mut replays)?;
    if !fits_max {
        return Ok(None);
    }
    if let Some(min) = hint {
        let below = min.saturating_sub(256);
        if probe(min, &mut replays)?.0 && (below == 0 || !probe(below, &mut replays)?.0) {
            return Ok(Some(MinCapacity {
                min_pool_bytes: min,
                replays,
                resolution: 256,
                exact: true,
            }));
        }
    }
    let mut fits = |limit: u64, replays: &mut usize| probe(limit, replays).map(|(f, _)| f);
    let floor = peak_live_bytes(trace).div_ceil(resolution) * resolution;
    let mut lo = floor.saturating_sub(resolution); // known (assumed) not to fit
    let mut step = (floor / 16).max(resolution).div_ceil(resolution) * resolution;
    let mut hi = floor.max(resolution);
    loop {
        if hi > max_limit {
            // One last try at the maximum.
            if fits(max_limit, &mut replays)? {
                hi = max_limit;
                break;
            }
            return Ok(None);
        }
        if fits(hi, &mut replays)? {
            break;
        }
        lo = hi;
        hi += step;
        step *= 2;
    }
    while hi - lo > resolution {
        let mid = lo + (hi - lo) / 2 / resolution * resolution;
        let mid = if mid <= lo { lo + resolution } else { mid };
        if fits(mid, &mut replays)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(MinCapacity {
        min_pool_bytes: hi,
        replays,
        resolution,
        exact: false,
    }))
}
