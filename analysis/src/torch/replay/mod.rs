//! Replaying a snapshot's trace over the caching allocator's layout: the segments, the
//! blocks in them with their real sizes, and `memory_allocated()` / `memory_reserved()`
//! after every entry.
//!
//! The trace gives requested sizes; a block's size is what the allocator handed out:
//! the request rounded (`round_size`), or the whole free region it was cut from when the
//! remainder was too small to split (512 bytes in the small pool and in expandable
//! segments; more than 1 MiB, below `max_split_size`, in the large pool). The free region
//! at an address runs to the next block still held (or waiting for its streams) or the
//! end of the segment. The state before the trace's first entry is the state at the dump
//! with the trace undone (see `scan::Before`); blocks the trace frees without having
//! allocated them get their rounded request as size (counted in
//! [`Anomalies::estimated_sizes`]). At the end the replayed blocks are checked against
//! the dump's ([`EndCheck`]).
//!
//! This module owns the replay itself (the state before the trace, the steps, the end
//! check) and the types observers see; `sim` owns one device's state and how an entry
//! changes it, `rules` the rounding rules taken from the settings.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap as FastMap;
use serde::Serialize;

mod rules;
mod sim;

pub use rules::Rules;

use super::model::{Action, BlockState, Segment};
use super::scan::{insert_range, remove_range, Scan, Trace};
use super::spill::SpillError;
use super::stacks::StackId;

/// A segment (or, expandable, a mapped page range) during the replay.
#[derive(Debug, Clone)]
pub struct Seg {
    pub size: u64,
    pub expandable: bool,
    pub stack: StackId,
    pub stream: u64,
    pub since_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlkState {
    Allocated,
    PendingFree,
}

/// A block held by the caller (or waiting for its streams) during the replay.
#[derive(Debug, Clone)]
pub struct Blk {
    pub size: u64,
    pub requested: u64,
    pub stack: StackId,
    pub state: BlkState,
    pub since_us: i64,
    pub stream: u64,
    /// There before the trace's first entry.
    pub before: bool,
    pub user_metadata: u32,
}

/// Entries the layout did not account for (0 on a consistent snapshot).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Anomalies {
    /// Frees of blocks the replay did not hold.
    pub unknown_frees: u64,
    /// Segment frees / unmaps of memory the replay did not have.
    pub unknown_segment_frees: u64,
    /// Allocations outside every segment.
    pub outside_segments: u64,
    /// Allocations at an address still held (the earlier block is dropped).
    pub overlapping: u64,
    /// Allocations larger than the free region at their address.
    pub over_region: u64,
    /// Blocks from before the trace whose size is the rounded request.
    pub estimated_sizes: u64,
}

/// One device's replayed state.
pub struct Sim {
    pub device: i32,
    pub segments: BTreeMap<u64, Seg>,
    pub blocks: BTreeMap<u64, Blk>,
    /// `memory_allocated()`: blocks held by the caller.
    pub allocated: u64,
    /// Blocks held or waiting for their streams.
    pub active: u64,
    /// `memory_reserved()`: segment bytes.
    pub reserved: u64,
    by_size: BTreeSet<(u64, u64)>,
    by_site: FastMap<u32, (u64, u64)>,
    pub anomalies: Anomalies,
    rules: Rules,
    site_of: Box<dyn Fn(StackId) -> u32>,
}

/// One replayed change, as observers see it.
#[derive(Debug, Clone)]
pub struct Step {
    pub action: Action,
    pub time_us: i64,
    pub addr: u64,
    /// Bytes: the block's size (alloc, frees), the segment's or range's (segments), the
    /// request (oom).
    pub size: u64,
    /// The caller's requested bytes (alloc, frees, oom).
    pub requested: u64,
    pub stack: StackId,
    pub stream: u64,
    pub device_free: u64,
    /// Part of the state before the trace's first entry.
    pub before: bool,
    pub user_metadata: u32,
    /// `segment_unmap`: the mapped ranges removed whole, and the remainders of ranges cut
    /// in part (removed and put back smaller).
    pub unmapped: Vec<(u64, u64)>,
    pub remapped: Vec<(u64, u64)>,
    /// The entry did not match the layout (see [`Anomalies`]); nothing changed.
    pub ignored: bool,
}

impl Step {
    fn new(action: Action, time_us: i64) -> Self {
        Step {
            action,
            time_us,
            addr: 0,
            size: 0,
            requested: 0,
            stack: StackId::NONE,
            stream: 0,
            device_free: 0,
            before: false,
            user_metadata: 0,
            unmapped: Vec::new(),
            remapped: Vec::new(),
            ignored: false,
        }
    }
}

/// How the replayed end compares with the dump's segments.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EndCheck {
    /// Active blocks at the dump.
    pub blocks: u64,
    pub size_mismatches: u64,
    pub state_mismatches: u64,
    /// At the dump, not replayed.
    pub missing: u64,
    /// Replayed, not at the dump.
    pub extra: u64,
    pub replayed_allocated: u64,
    pub dump_allocated: u64,
    pub replayed_reserved: u64,
    pub dump_reserved: u64,
    /// A few mismatches, described.
    pub examples: Vec<String>,
}

impl EndCheck {
    pub fn consistent(&self) -> bool {
        self.size_mismatches == 0
            && self.state_mismatches == 0
            && self.missing == 0
            && self.extra == 0
            && self.replayed_allocated == self.dump_allocated
            && self.replayed_reserved == self.dump_reserved
    }
}

/// Receives the replay, device by device.
pub trait Observer {
    type Error;
    fn device_start(&mut self, _sim: &Sim, _trace: Option<&Trace>) -> Result<(), Self::Error> {
        Ok(())
    }
    /// Before a step changes the state.
    fn before(&mut self, _sim: &Sim, _step: &Step) -> Result<(), Self::Error> {
        Ok(())
    }
    /// After it did.
    fn after(&mut self, sim: &Sim, step: &Step) -> Result<(), Self::Error>;
    fn device_end(&mut self, _sim: &Sim, _check: &EndCheck) -> Result<(), Self::Error> {
        Ok(())
    }
}

#[derive(Debug)]
pub enum ReplayError<E> {
    Io(std::io::Error),
    Observer(E),
}

/// The state before the trace's first entry, as steps.
fn before_steps(
    scan: &Scan,
    device: i32,
    trace: Option<&Trace>,
    rules: &Rules,
    t0: i64,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let empty = Default::default();
    let before = trace.map_or(&empty, |t| &t.before);
    let end: Vec<&Segment> = scan
        .segments
        .iter()
        .filter(|s| s.device == device)
        .collect();
    let mut segs: Vec<(u64, u64, bool, StackId, u64)> = Vec::new();
    for s in &end {
        if s.is_expandable {
            let mut r = BTreeMap::new();
            insert_range(&mut r, s.address, s.total_size);
            for (&a, &n) in &before.live_mapped {
                remove_range(&mut r, a, n);
            }
            segs.extend(r.into_iter().map(|(a, n)| (a, n, true, s.stack, s.stream)));
        } else if !before.live_segments.contains(&s.address) {
            segs.push((s.address, s.total_size, false, s.stack, s.stream));
        }
    }
    segs.extend(
        before
            .segments
            .iter()
            .map(|&(a, n)| (a, n, false, StackId::NONE, 0)),
    );
    segs.extend(
        before
            .mapped
            .iter()
            .map(|&(a, n)| (a, n, true, StackId::NONE, 0)),
    );
    segs.sort_unstable_by_key(|s| s.0);
    for (addr, size, expandable, stack, stream) in segs {
        let mut st = Step::new(
            if expandable {
                Action::SegmentMap
            } else {
                Action::SegmentAlloc
            },
            t0,
        );
        st.addr = addr;
        st.size = size;
        st.stack = stack;
        st.stream = stream;
        st.before = true;
        steps.push(st);
    }
    let mut blocks: Vec<(u64, u64, u64, StackId, bool, bool)> = Vec::new();
    for s in &end {
        for b in &s.blocks {
            if b.state != BlockState::Inactive && !before.live_blocks.contains(&b.address) {
                let pending = b.state == BlockState::ActivePendingFree;
                blocks.push((b.address, b.size, b.requested_size, b.stack, pending, false));
            }
        }
    }
    for &(a, req, pending) in &before.blocks {
        blocks.push((a, rules.round(req), req, StackId::NONE, pending, true));
    }
    blocks.sort_unstable_by_key(|b| b.0);
    for (addr, size, requested, stack, pending, estimated) in blocks {
        let mut st = Step::new(Action::Alloc, t0);
        st.addr = addr;
        st.size = size;
        st.requested = requested;
        st.stack = stack;
        st.before = true;
        // Marks an estimated size for the counter (cleared when applied).
        st.ignored = estimated;
        steps.push(st);
        if pending {
            let mut f = Step::new(Action::FreeRequested, t0);
            f.addr = addr;
            f.size = size;
            f.requested = requested;
            f.stack = stack;
            f.before = true;
            steps.push(f);
        }
    }
    steps
}

/// The devices a snapshot has state or a trace for, in order.
pub fn devices(scan: &Scan) -> Vec<i32> {
    let mut d: Vec<i32> = scan
        .traces
        .iter()
        .filter(|t| t.range.len > 0)
        .map(|t| t.device)
        .chain(scan.segments.iter().map(|s| s.device))
        .collect();
    d.sort_unstable();
    d.dedup();
    d
}

/// The earliest trace time of the snapshot (Unix µs), if it has a trace.
pub fn start_time_us(scan: &Scan) -> Option<i64> {
    scan.traces.iter().filter_map(|t| t.first_time_us).min()
}

/// Replays every device of `scan` into `obs`.
pub fn replay<O: Observer>(scan: &Scan, obs: &mut O) -> Result<(), ReplayError<O::Error>> {
    let rules = Rules::new(&scan.settings);
    let t_start = start_time_us(scan).unwrap_or(0);
    for device in devices(scan) {
        let trace = scan
            .traces
            .iter()
            .find(|t| t.device == device && t.range.len > 0);
        let t0 = trace.and_then(|t| t.first_time_us).unwrap_or(t_start);
        let stacks = &scan.stacks;
        let keys: Vec<u32> = (0..stacks.stack_count() as u32)
            .map(|i| stacks.site_key(StackId(i)))
            .collect();
        let site_of =
            Box::new(move |s: StackId| keys.get(s.0 as usize).copied().unwrap_or(u32::MAX));
        let mut sim = Sim::new(device, rules.clone(), site_of);
        obs.device_start(&sim, trace)
            .map_err(ReplayError::Observer)?;
        for mut st in before_steps(scan, device, trace, &rules, t0) {
            let estimated = std::mem::take(&mut st.ignored);
            obs.before(&sim, &st).map_err(ReplayError::Observer)?;
            match st.action {
                Action::SegmentAlloc | Action::SegmentMap => sim.add_segment(
                    st.addr,
                    st.size,
                    st.action == Action::SegmentMap,
                    st.stack,
                    st.stream,
                    t0,
                ),
                Action::Alloc => {
                    if estimated {
                        sim.anomalies.estimated_sizes += 1;
                    }
                    sim.add_block(
                        st.addr,
                        Blk {
                            size: st.size,
                            requested: st.requested,
                            stack: st.stack,
                            state: BlkState::Allocated,
                            since_us: t0,
                            stream: 0,
                            before: true,
                            user_metadata: 0,
                        },
                    )
                }
                Action::FreeRequested => {
                    if let Some(b) = sim.blocks.get(&st.addr).cloned() {
                        sim.unaccount(st.addr, &b);
                        if let Some(bm) = sim.blocks.get_mut(&st.addr) {
                            bm.state = BlkState::PendingFree;
                        }
                    }
                }
                _ => {}
            }
            obs.after(&sim, &st).map_err(ReplayError::Observer)?;
        }
        if let Some(t) = trace {
            let mut step = Step::new(Action::Snapshot, t0);
            let dump_stacks = dump_stacks(scan, device, t);
            let mut stackless = t.stackless_live.iter().peekable();
            let mut index = 0u64;
            scan.spill
                .for_each(t.range, |e| {
                    let i = index;
                    index += 1;
                    let mut with_stack;
                    let e = match stackless.next_if(|&&(at, _)| at == i) {
                        Some((_, addr)) => {
                            with_stack = *e;
                            with_stack.stack =
                                dump_stacks.get(addr).copied().unwrap_or(StackId::NONE);
                            &with_stack
                        }
                        None => e,
                    };
                    step.action = e.action;
                    step.time_us = e.time_us;
                    step.ignored = false;
                    step.device_free = 0;
                    step.unmapped.clear();
                    step.remapped.clear();
                    // The step as the entry reads before it is applied.
                    step.addr = e.addr;
                    step.size = e.size;
                    step.requested = e.size;
                    step.stack = e.stack;
                    step.stream = e.stream;
                    step.user_metadata = e.user_metadata;
                    if let Some(b) = sim.blocks.get(&e.addr) {
                        if matches!(e.action, Action::FreeRequested | Action::FreeCompleted) {
                            step.size = b.size;
                        }
                    }
                    obs.before(&sim, &step)?;
                    sim.apply(e, &mut step);
                    obs.after(&sim, &step)
                })
                .map_err(|e| match e {
                    SpillError::Io(e) => ReplayError::Io(e),
                    SpillError::Visit(e) => ReplayError::Observer(e),
                })?;
        }
        let check = end_check(scan, &sim);
        obs.device_end(&sim, &check)
            .map_err(ReplayError::Observer)?;
    }
    Ok(())
}

/// The stacks of the dump's active blocks by address, for the allocations the trace
/// recorded without one (see [`Trace::stackless_live`]); empty when there are none.
fn dump_stacks(scan: &Scan, device: i32, trace: &Trace) -> FastMap<u64, StackId> {
    if trace.stackless_live.is_empty() {
        return FastMap::default();
    }
    scan.segments
        .iter()
        .filter(|s| s.device == device)
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state != BlockState::Inactive && b.stack != StackId::NONE)
        .map(|b| (b.address, b.stack))
        .collect()
}

fn end_check(scan: &Scan, sim: &Sim) -> EndCheck {
    let mut c = EndCheck {
        replayed_allocated: sim.allocated,
        replayed_reserved: sim.reserved,
        ..EndCheck::default()
    };
    let mut seen = 0u64;
    for s in scan.segments.iter().filter(|s| s.device == sim.device) {
        c.dump_reserved = c.dump_reserved.wrapping_add(s.total_size);
        for b in &s.blocks {
            if b.state == BlockState::Inactive {
                continue;
            }
            c.blocks += 1;
            if b.state == BlockState::ActiveAllocated {
                c.dump_allocated = c.dump_allocated.wrapping_add(b.size);
            }
            let want = if b.state == BlockState::ActiveAllocated {
                BlkState::Allocated
            } else {
                BlkState::PendingFree
            };
            match sim.blocks.get(&b.address) {
                None => {
                    c.missing += 1;
                    if c.examples.len() < 5 {
                        c.examples.push(format!(
                            "block 0x{:x} ({} bytes) not replayed",
                            b.address, b.size
                        ));
                    }
                }
                Some(r) => {
                    seen += 1;
                    if r.size != b.size {
                        c.size_mismatches += 1;
                        if c.examples.len() < 5 {
                            c.examples.push(format!(
                                "block 0x{:x}: replayed {} bytes, dump {} (requested {})",
                                b.address, r.size, b.size, b.requested_size
                            ));
                        }
                    }
                    if r.state != want {
                        c.state_mismatches += 1;
                    }
                }
            }
        }
    }
    c.extra = (sim.blocks.len() as u64).saturating_sub(seen);
    c
}
