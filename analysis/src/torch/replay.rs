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

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap as FastMap;
use serde::Serialize;

use super::model::{Action, AllocatorSettings, BlockState, Entry, Segment};
use super::scan::{insert_range, remove_range, Scan, Trace};
use super::spill::SpillError;
use super::stacks::StackId;
use crate::alloc::torch::{round_size, MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};

/// The allocator rules the replay needs from the settings.
#[derive(Debug, Clone)]
pub struct Rules {
    divisions: Option<Vec<u64>>,
    max_split: u64,
}

impl Rules {
    pub fn new(s: &AllocatorSettings) -> Self {
        Rules {
            divisions: s.roundup_power2_divisions.clone(),
            max_split: s.max_split_size.unwrap_or(u64::MAX),
        }
    }

    /// `round_size`, with `roundup_power2_divisions` when set.
    pub fn round(&self, size: u64) -> u64 {
        if let Some(divs) = &self.divisions {
            if size >= MIN_BLOCK {
                // Intervals by power of two from 1 MiB (index 0) to 32 GiB (15).
                let log = 63 - u64::from(size.leading_zeros());
                let index = (log.saturating_sub(20) as usize).min(divs.len().saturating_sub(1));
                let d = divs.get(index).copied().unwrap_or(0);
                if d > 1 && size > MIN_BLOCK * d {
                    return power2_division(size, d);
                }
            }
        }
        round_size(size)
    }
}

/// The end of `[a, a + n)`, saturated (damaged snapshots may hold any number).
fn end_of(a: u64, n: u64) -> u64 {
    a.saturating_add(n)
}

/// `roundup_power2_next_division`.
fn power2_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << (63 - size.leading_zeros());
    let step = floor >> (63 - divisions.leading_zeros());
    if step == 0 {
        return floor << 1;
    }
    let down = size & !(step - 1);
    if down == size {
        size
    } else {
        down.saturating_add(step)
    }
}

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

impl Sim {
    fn new(device: i32, rules: Rules, site_of: Box<dyn Fn(StackId) -> u32>) -> Self {
        Sim {
            device,
            segments: BTreeMap::new(),
            blocks: BTreeMap::new(),
            allocated: 0,
            active: 0,
            reserved: 0,
            by_size: BTreeSet::new(),
            by_site: FastMap::default(),
            anomalies: Anomalies::default(),
            rules,
            site_of,
        }
    }

    /// The `n` largest allocated blocks, largest first.
    pub fn largest(&self, n: usize) -> impl Iterator<Item = (u64, &Blk)> {
        self.by_size
            .iter()
            .rev()
            .take(n)
            .filter_map(|&(_, a)| self.blocks.get(&a).map(|b| (a, b)))
    }

    /// Allocated bytes and blocks per site key (see `StackTable::site_key`).
    pub fn by_site(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        self.by_site
            .iter()
            .filter(|(_, (b, _))| *b > 0)
            .map(|(&k, &(b, n))| (k, b, n))
    }

    /// The largest free region in the segments of one pool (small: 2 MiB segments of
    /// requests up to 1 MiB).
    pub fn largest_free(&self, small: bool) -> u64 {
        let mut best = 0;
        let mut run_start: Option<(u64, u64)> = None; // (region start, mapped end)
        let flush = |start: u64, end: u64, best: &mut u64| {
            let mut at = start;
            for (&a, b) in self.blocks.range(start..end) {
                *best = (*best).max(a.saturating_sub(at));
                at = end_of(a, b.size);
            }
            *best = (*best).max(end.saturating_sub(at));
        };
        for (&a, s) in &self.segments {
            let is_small = !s.expandable && s.size == SMALL_BUFFER;
            if s.expandable {
                // Contiguous mapped ranges form one region.
                match run_start {
                    Some((st, end)) if end == a => run_start = Some((st, end_of(a, s.size))),
                    Some((st, end)) => {
                        flush(st, end, &mut best);
                        run_start = Some((a, end_of(a, s.size)));
                    }
                    None => run_start = Some((a, end_of(a, s.size))),
                }
                continue;
            }
            if is_small == small {
                flush(a, end_of(a, s.size), &mut best);
            }
        }
        if let (Some((st, end)), false) = (run_start, small) {
            flush(st, end, &mut best);
        }
        best
    }

    fn add_block(&mut self, addr: u64, b: Blk) {
        if b.state == BlkState::Allocated {
            self.allocated = self.allocated.wrapping_add(b.size);
            self.by_size.insert((b.size, addr));
            let e = self.by_site.entry((self.site_of)(b.stack)).or_default();
            e.0 = e.0.wrapping_add(b.size);
            e.1 += 1;
        }
        self.active = self.active.wrapping_add(b.size);
        if let Some(old) = self.blocks.insert(addr, b) {
            self.anomalies.overlapping += 1;
            self.unaccount(addr, &old);
            self.active = self.active.wrapping_sub(old.size);
        }
    }

    fn unaccount(&mut self, addr: u64, b: &Blk) {
        if b.state == BlkState::Allocated {
            self.allocated = self.allocated.wrapping_sub(b.size);
            self.by_size.remove(&(b.size, addr));
            if let Some(e) = self.by_site.get_mut(&(self.site_of)(b.stack)) {
                e.0 = e.0.wrapping_sub(b.size);
                e.1 = e.1.wrapping_sub(1);
            }
        }
    }

    /// The end of the segment memory that runs on from `addr` (adjacent mapped ranges
    /// of an expandable segment join), and whether it is expandable.
    fn segment_end(&self, addr: u64) -> Option<(u64, bool)> {
        let (&start, s) = self.segments.range(..=addr).next_back()?;
        if end_of(start, s.size) <= addr {
            return None;
        }
        let mut end = end_of(start, s.size);
        if s.expandable {
            while let Some(next) = self
                .segments
                .get(&end)
                .filter(|n| n.expandable && n.size > 0)
            {
                end = end_of(end, next.size);
            }
        }
        Some((end, s.expandable))
    }

    /// The size of the block an allocation of `requested` bytes at `addr` gets.
    fn block_size(&mut self, addr: u64, requested: u64) -> u64 {
        let rounded = self.rules.round(requested);
        let Some((seg_end, expandable)) = self.segment_end(addr) else {
            self.anomalies.outside_segments += 1;
            return rounded;
        };
        let next = self
            .blocks
            .range(addr.saturating_add(1)..)
            .next()
            .map_or(u64::MAX, |(&a, _)| a);
        let free = seg_end.min(next) - addr;
        if free < rounded {
            self.anomalies.over_region += 1;
            return rounded;
        }
        let remaining = free - rounded;
        let split = if rounded <= SMALL_SIZE || expandable {
            remaining >= MIN_BLOCK
        } else {
            rounded < self.rules.max_split && remaining > SMALL_SIZE
        };
        if split {
            rounded
        } else {
            free
        }
    }

    fn apply(&mut self, e: &Entry, step: &mut Step) {
        step.addr = e.addr;
        step.requested = e.size;
        step.size = e.size;
        step.stack = e.stack;
        step.stream = e.stream;
        step.user_metadata = e.user_metadata;
        match e.action {
            Action::Alloc => {
                let size = self.block_size(e.addr, e.size);
                step.size = size;
                self.add_block(
                    e.addr,
                    Blk {
                        size,
                        requested: e.size,
                        stack: e.stack,
                        state: BlkState::Allocated,
                        since_us: e.time_us,
                        stream: e.stream,
                        before: false,
                        user_metadata: e.user_metadata,
                    },
                );
            }
            Action::FreeRequested => match self.blocks.get(&e.addr).cloned() {
                Some(b) if b.state == BlkState::Allocated => {
                    step.size = b.size;
                    step.stack = b.stack;
                    self.unaccount(e.addr, &b);
                    if let Some(bm) = self.blocks.get_mut(&e.addr) {
                        bm.state = BlkState::PendingFree;
                    }
                }
                _ => {
                    self.anomalies.unknown_frees += 1;
                    step.ignored = true;
                }
            },
            Action::FreeCompleted => match self.blocks.remove(&e.addr) {
                Some(b) => {
                    step.size = b.size;
                    step.stack = b.stack;
                    self.unaccount(e.addr, &b);
                    self.active = self.active.wrapping_sub(b.size);
                }
                None => {
                    self.anomalies.unknown_frees += 1;
                    step.ignored = true;
                }
            },
            Action::SegmentAlloc => {
                self.add_segment(e.addr, e.size, false, e.stack, e.stream, e.time_us);
            }
            Action::SegmentFree => match self.segments.remove(&e.addr) {
                Some(s) => {
                    step.size = s.size;
                    self.reserved = self.reserved.wrapping_sub(s.size);
                }
                None => {
                    self.anomalies.unknown_segment_frees += 1;
                    step.ignored = true;
                }
            },
            Action::SegmentMap => {
                self.add_segment(e.addr, e.size, true, e.stack, e.stream, e.time_us);
            }
            Action::SegmentUnmap => self.unmap(e, step),
            Action::Oom => {
                step.device_free = e.device_free;
            }
            Action::Snapshot => {}
        }
    }

    fn add_segment(
        &mut self,
        addr: u64,
        size: u64,
        expandable: bool,
        stack: StackId,
        stream: u64,
        t: i64,
    ) {
        let seg = Seg {
            size,
            expandable,
            stack,
            stream,
            since_us: t,
        };
        if let Some(old) = self.segments.insert(addr, seg) {
            self.reserved = self.reserved.wrapping_sub(old.size);
        }
        self.reserved = self.reserved.wrapping_add(size);
    }

    fn unmap(&mut self, e: &Entry, step: &mut Step) {
        let mut ranges: BTreeMap<u64, u64> = BTreeMap::new();
        let end = e.addr.saturating_add(e.size);
        let first = self
            .segments
            .range(..=e.addr)
            .next_back()
            .map_or(e.addr, |(&a, _)| a);
        let touched: Vec<u64> = self
            .segments
            .range(first..end)
            .filter(|(&a, s)| s.expandable && end_of(a, s.size) > e.addr)
            .map(|(&a, _)| a)
            .collect();
        if touched.is_empty() {
            self.anomalies.unknown_segment_frees += 1;
            step.ignored = true;
            return;
        }
        let mut kept: Vec<(u64, Seg)> = Vec::new();
        for a in touched {
            if let Some(s) = self.segments.remove(&a) {
                self.reserved = self.reserved.wrapping_sub(s.size);
                step.unmapped.push((a, s.size));
                ranges.insert(a, s.size);
                remove_range(&mut ranges, e.addr, e.size);
                for (&ra, &rn) in &ranges {
                    kept.push((
                        ra,
                        Seg {
                            size: rn,
                            ..s.clone()
                        },
                    ));
                }
                ranges.clear();
            }
        }
        for (a, s) in kept {
            step.remapped.push((a, s.size));
            self.reserved = self.reserved.wrapping_add(s.size);
            self.segments.insert(a, s);
        }
    }
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
            scan.spill
                .for_each(t.range, |e| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power2_divisions_round_like_pytorch() {
        // 1.1 GiB with 4 divisions per power of two: the next quarter step above 1 GiB.
        assert_eq!(power2_division(1_181_116_006, 4), 1_342_177_280);
        assert_eq!(power2_division(1 << 30, 4), 1 << 30);
        assert_eq!(
            power2_division((1 << 30) + (1 << 28), 4),
            (1 << 30) + (1 << 28)
        );
        let rules = Rules {
            divisions: Some(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0]),
            max_split: u64::MAX,
        };
        assert_eq!(rules.round(1_181_116_006), 1_342_177_280);
        assert_eq!(rules.round(1000), 1024);
    }
}
