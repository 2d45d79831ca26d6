//! One device's replayed state, changed entry by entry: adding and releasing blocks
//! (their real size: the rounded request, or the whole free region when the remainder
//! is too small to split), mapping and unmapping segments, the accounting of
//! `memory_allocated()` / `memory_reserved()`, and the questions observers ask (the
//! largest blocks, bytes per call site, the largest free region).

use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap as FastMap;

use super::rules::Rules;
use super::{Anomalies, Blk, BlkState, Seg, Sim, Step};
use crate::alloc::torch::{MIN_BLOCK, SMALL_BUFFER, SMALL_SIZE};
use crate::torch::model::{Action, Entry};
use crate::torch::scan::remove_range;
use crate::torch::stacks::StackId;

/// The end of `[a, a + n)`, saturated (damaged snapshots may hold any number).
fn end_of(a: u64, n: u64) -> u64 {
    a.saturating_add(n)
}

impl Sim {
    pub(super) fn new(device: i32, rules: Rules, site_of: Box<dyn Fn(StackId) -> u32>) -> Self {
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

    pub(super) fn add_block(&mut self, addr: u64, b: Blk) {
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

    pub(super) fn unaccount(&mut self, addr: u64, b: &Blk) {
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

    pub(super) fn apply(&mut self, e: &Entry, step: &mut Step) {
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

    pub(super) fn add_segment(
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
