//! What `memwatch report SNAPSHOT.pickle` shows, and what the OOM doctor reads: per
//! device, allocated and reserved bytes at the dump (exact, from the segments) and over
//! time (replayed), the peaks with the blocks and Python lines that held the memory, and
//! every OOM with the state the allocator was in.
//!
//! Times are ns since the snapshot's first trace entry (`time_unix_us` gives PyTorch's
//! own clock); bytes are integers. The timeline keeps each bucket's maximum, so no peak
//! hides between points.

use std::collections::BTreeMap;

use serde::Serialize;

use super::model::{Action, AllocatorSettings, BlockState};
use super::replay::{self, Anomalies, Blk, EndCheck, Observer, Sim, Step};
use super::scan::{Scan, Trace};
use super::stacks::{Frame, StackId, StackTable, UNKNOWN_SITE};
use super::SnapshotError;
use crate::alloc::torch::SMALL_SIZE;

/// Knobs of [`report`].
#[derive(Debug, Clone)]
pub struct ReportOptions {
    /// Blocks listed per view.
    pub top: usize,
    /// Python lines (sites) listed per view.
    pub sites: usize,
    /// Timeline buckets per device.
    pub buckets: usize,
    /// OOMs described in full per device (all are counted).
    pub max_ooms: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            top: 10,
            sites: 20,
            buckets: 200,
            max_ooms: 100,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SnapshotReport {
    pub file: String,
    pub file_bytes: u64,
    /// Always `pytorch_memory_snapshot`.
    pub format: &'static str,
    /// PyTorch's clock at the first trace entry (Unix µs); `None` without a trace.
    pub start_time_unix_us: Option<i64>,
    pub allocator_settings: AllocatorSettings,
    pub devices: Vec<DeviceReport>,
    pub annotations: usize,
    pub distinct_stacks: usize,
    /// Trace actions this build does not know (skipped), with counts.
    pub unknown_actions: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceReport {
    pub device: i32,
    pub trace_entries: u64,
    /// Trace entries by action.
    pub actions: BTreeMap<&'static str, u64>,
    /// From the first to the last trace entry.
    pub duration_ns: u64,
    /// `memory_allocated()` at the dump: the dump's blocks held by the caller.
    pub allocated_bytes: u64,
    /// `memory_reserved()` at the dump: its segments.
    pub reserved_bytes: u64,
    /// Allocated plus blocks waiting for their streams.
    pub active_bytes: u64,
    pub segments: u64,
    pub blocks: u64,
    pub peak_allocated: Peak,
    pub peak_reserved: Peak,
    /// The largest blocks and the Python lines holding memory at the allocated peak.
    pub at_peak: LiveView,
    /// The same at the end of the trace (replayed).
    pub at_end: LiveView,
    pub ooms_total: u64,
    pub ooms: Vec<OomReport>,
    pub largest_segments: Vec<SegmentView>,
    pub timeline: Vec<Bucket>,
    /// The state before the first trace entry (a trace cut by `max_entries`).
    pub before_trace: BeforeTrace,
    pub anomalies: Anomalies,
    /// The replayed end against the dump's segments.
    pub end_check: EndCheck,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Peak {
    pub bytes: u64,
    pub at_ns: u64,
    pub time_unix_us: i64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveView {
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub blocks: Vec<BlockView>,
    /// Allocated bytes by site (innermost Python line outside PyTorch), largest first.
    pub by_site: Vec<SiteBytes>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BlockView {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub stream: u64,
    /// When it was allocated (ns since the start); `None` before the trace.
    pub allocated_at_ns: Option<u64>,
    pub site: Option<String>,
    pub frames: Vec<Frame>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_metadata: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteBytes {
    /// `file.py:42 in function`, or `unknown` (no Python frame recorded).
    pub site: String,
    pub bytes: u64,
    pub blocks: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct OomReport {
    pub at_ns: u64,
    pub time_unix_us: i64,
    /// What the failed allocation asked for.
    pub requested_bytes: u64,
    /// Free device memory the driver reported.
    pub device_free_bytes: u64,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    pub active_bytes: u64,
    /// Reserved but not allocated: cached free space and blocks waiting for streams.
    pub reserved_unallocated_bytes: u64,
    /// `small` (requests up to 1 MiB) or `large`: the pool the request needed.
    pub pool: &'static str,
    /// The largest free region of that pool's segments: when it is smaller than the
    /// request while `reserved_unallocated_bytes` is not, the cache is fragmented.
    pub largest_free_block_bytes: u64,
    pub segments: u64,
    pub stream: u64,
    pub site: Option<String>,
    pub frames: Vec<Frame>,
    pub live: LiveView,
}

#[derive(Debug, Clone, Serialize)]
pub struct SegmentView {
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub segment_type: String,
    pub is_expandable: bool,
    pub stream: u64,
    pub blocks: usize,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Bucket {
    pub start_ns: u64,
    pub end_ns: u64,
    pub allocated_max: u64,
    pub reserved_max: u64,
    pub allocated_end: u64,
    pub reserved_end: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct BeforeTrace {
    pub blocks: u64,
    pub allocated_bytes: u64,
    pub segments: u64,
    pub reserved_bytes: u64,
}

/// Reads nothing: builds the report of a scanned snapshot.
pub fn report(scan: &Scan, opts: &ReportOptions) -> Result<SnapshotReport, SnapshotError> {
    let start = replay::start_time_us(scan);
    let mut obs = Reporter {
        scan,
        opts,
        start_us: start.unwrap_or(0),
        devices: Vec::new(),
        cur: None,
    };
    replay::replay(scan, &mut obs).map_err(|e| match e {
        replay::ReplayError::Io(error) => SnapshotError::Io {
            path: scan.file.clone().into(),
            error,
        },
        replay::ReplayError::Observer(never) => match never {},
    })?;
    Ok(SnapshotReport {
        file: scan.file.clone(),
        file_bytes: scan.file_bytes,
        format: "pytorch_memory_snapshot",
        start_time_unix_us: start,
        allocator_settings: scan.settings.clone(),
        devices: obs.devices,
        annotations: scan.annotations.len(),
        distinct_stacks: scan.stacks.stack_count(),
        unknown_actions: scan.unknown_actions.clone(),
    })
}

/// Renders a stack's site.
pub fn site_label(stacks: &StackTable, id: StackId) -> Option<String> {
    stacks.site(id).map(Frame::site_label)
}

struct Current {
    report: DeviceReport,
    t0_us: i64,
    span_us: i64,
    peak_pending: bool,
    buckets: Vec<Option<Bucket>>,
}

struct Reporter<'a> {
    scan: &'a Scan,
    opts: &'a ReportOptions,
    start_us: i64,
    devices: Vec<DeviceReport>,
    cur: Option<Current>,
}

impl Reporter<'_> {
    fn ns(&self, t_us: i64) -> u64 {
        (t_us.saturating_sub(self.start_us).max(0) as u64).saturating_mul(1000)
    }

    fn block_view(&self, addr: u64, b: &Blk) -> BlockView {
        let stacks = &self.scan.stacks;
        BlockView {
            address: addr,
            size: b.size,
            requested_size: b.requested,
            stream: b.stream,
            allocated_at_ns: (!b.before).then(|| self.ns(b.since_us)),
            site: site_label(stacks, b.stack),
            frames: stacks.frames(b.stack).cloned().collect(),
            user_metadata: stacks.text_of(b.user_metadata).to_string(),
        }
    }

    fn live_view(&self, sim: &Sim) -> LiveView {
        let stacks = &self.scan.stacks;
        let mut by_site: Vec<SiteBytes> = sim
            .by_site()
            .map(|(k, bytes, blocks)| SiteBytes {
                site: stacks
                    .frame_by_key(k)
                    .map_or_else(|| UNKNOWN_SITE.to_string(), Frame::site_label),
                bytes,
                blocks,
            })
            .collect();
        by_site.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site)));
        by_site.truncate(self.opts.sites);
        LiveView {
            allocated_bytes: sim.allocated,
            reserved_bytes: sim.reserved,
            blocks: sim
                .largest(self.opts.top)
                .map(|(a, b)| self.block_view(a, b))
                .collect(),
            by_site,
        }
    }
}

impl Observer for Reporter<'_> {
    type Error = std::convert::Infallible;

    fn device_start(&mut self, sim: &Sim, trace: Option<&Trace>) -> Result<(), Self::Error> {
        let (entries, actions, first, last) = match trace {
            Some(t) => (
                t.range.len,
                t.actions.clone(),
                t.first_time_us.unwrap_or(self.start_us),
                t.last_time_us.unwrap_or(self.start_us),
            ),
            None => (0, BTreeMap::new(), self.start_us, self.start_us),
        };
        let segs: Vec<_> = self
            .scan
            .segments
            .iter()
            .filter(|s| s.device == sim.device)
            .collect();
        let mut largest: Vec<SegmentView> = segs
            .iter()
            .map(|s| SegmentView {
                address: s.address,
                total_size: s.total_size,
                allocated_size: s.allocated_size,
                segment_type: s.segment_type.clone(),
                is_expandable: s.is_expandable,
                stream: s.stream,
                blocks: s.blocks.len(),
            })
            .collect();
        largest.sort_by(|a, b| {
            b.total_size
                .cmp(&a.total_size)
                .then(a.address.cmp(&b.address))
        });
        largest.truncate(self.opts.top);
        let blocks = || segs.iter().flat_map(|s| s.blocks.iter());
        let report = DeviceReport {
            device: sim.device,
            trace_entries: entries,
            actions,
            duration_ns: (last.saturating_sub(first).max(0) as u64).saturating_mul(1000),
            allocated_bytes: blocks()
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size)
                .sum(),
            reserved_bytes: segs.iter().map(|s| s.total_size).sum(),
            active_bytes: blocks()
                .filter(|b| b.state != BlockState::Inactive)
                .map(|b| b.size)
                .sum(),
            segments: segs.len() as u64,
            blocks: blocks().filter(|b| b.state != BlockState::Inactive).count() as u64,
            peak_allocated: Peak::default(),
            peak_reserved: Peak::default(),
            at_peak: LiveView::default(),
            at_end: LiveView::default(),
            ooms_total: 0,
            ooms: Vec::new(),
            largest_segments: largest,
            timeline: Vec::new(),
            before_trace: BeforeTrace::default(),
            anomalies: Anomalies::default(),
            end_check: EndCheck::default(),
        };
        self.cur = Some(Current {
            report,
            t0_us: first,
            span_us: last.saturating_sub(first).max(0),
            peak_pending: false,
            buckets: vec![None; self.opts.buckets.max(1)],
        });
        Ok(())
    }

    fn before(&mut self, sim: &Sim, step: &Step) -> Result<(), Self::Error> {
        let pending = self.cur.as_ref().is_some_and(|c| c.peak_pending);
        if pending && matches!(step.action, Action::FreeRequested | Action::FreeCompleted) {
            let view = self.live_view(sim);
            if let Some(c) = &mut self.cur {
                c.report.at_peak = view;
                c.peak_pending = false;
            }
        }
        Ok(())
    }

    fn after(&mut self, sim: &Sim, step: &Step) -> Result<(), Self::Error> {
        let at_ns = self.ns(step.time_us);
        let oom = (step.action == Action::Oom).then(|| {
            let small = step.requested <= SMALL_SIZE;
            (small, sim.largest_free(small))
        });
        let oom_view = match oom {
            Some(_)
                if self
                    .cur
                    .as_ref()
                    .is_some_and(|c| c.report.ooms.len() < self.opts.max_ooms) =>
            {
                Some(self.live_view(sim))
            }
            _ => None,
        };
        let stacks = &self.scan.stacks;
        let Some(c) = &mut self.cur else {
            return Ok(());
        };
        let r = &mut c.report;
        if step.before {
            r.before_trace = BeforeTrace {
                blocks: sim.blocks.len() as u64,
                allocated_bytes: sim.allocated,
                segments: sim.segments.len() as u64,
                reserved_bytes: sim.reserved,
            };
        }
        if sim.allocated > r.peak_allocated.bytes {
            r.peak_allocated = Peak {
                bytes: sim.allocated,
                at_ns,
                time_unix_us: step.time_us,
            };
            c.peak_pending = true;
        }
        if sim.reserved > r.peak_reserved.bytes {
            r.peak_reserved = Peak {
                bytes: sim.reserved,
                at_ns,
                time_unix_us: step.time_us,
            };
        }
        if let Some((small, largest_free)) = oom {
            r.ooms_total += 1;
            if let Some(live) = oom_view {
                r.ooms.push(OomReport {
                    at_ns,
                    time_unix_us: step.time_us,
                    requested_bytes: step.requested,
                    device_free_bytes: step.device_free,
                    allocated_bytes: sim.allocated,
                    reserved_bytes: sim.reserved,
                    active_bytes: sim.active,
                    reserved_unallocated_bytes: sim.reserved.saturating_sub(sim.allocated),
                    pool: if small { "small" } else { "large" },
                    largest_free_block_bytes: largest_free,
                    segments: sim.segments.len() as u64,
                    stream: step.stream,
                    site: site_label(stacks, step.stack),
                    frames: stacks.frames(step.stack).cloned().collect(),
                    live,
                });
            }
        }
        let n = c.buckets.len() as i64;
        let rel = step.time_us.saturating_sub(c.t0_us).clamp(0, c.span_us);
        let i = if c.span_us == 0 {
            0
        } else {
            ((rel as i128 * n as i128) / (c.span_us as i128 + 1)) as usize
        };
        let last = c.buckets.len() - 1;
        let b = c.buckets[i.min(last)].get_or_insert(Bucket {
            allocated_max: sim.allocated,
            reserved_max: sim.reserved,
            ..Bucket::default()
        });
        b.allocated_max = b.allocated_max.max(sim.allocated);
        b.reserved_max = b.reserved_max.max(sim.reserved);
        b.allocated_end = sim.allocated;
        b.reserved_end = sim.reserved;
        Ok(())
    }

    fn device_end(&mut self, sim: &Sim, check: &EndCheck) -> Result<(), Self::Error> {
        let pending = self.cur.as_ref().is_some_and(|c| c.peak_pending);
        let peak_view = pending.then(|| self.live_view(sim));
        let end_view = self.live_view(sim);
        let start_ns = self.cur.as_ref().map_or(0, |c| self.ns(c.t0_us));
        let Some(mut c) = self.cur.take() else {
            return Ok(());
        };
        if let Some(v) = peak_view {
            c.report.at_peak = v;
        }
        c.report.at_end = end_view;
        c.report.anomalies = sim.anomalies.clone();
        c.report.end_check = check.clone();
        // Buckets without a step carry the level of the one before.
        let n = c.buckets.len() as u64;
        let span_ns = (c.span_us.max(0) as u64).saturating_mul(1000);
        let mut last = Bucket::default();
        for (i, b) in c.buckets.iter().enumerate() {
            let i = i as u64;
            let at = |k: u64| {
                start_ns
                    .saturating_add((u128::from(span_ns) * u128::from(k) / u128::from(n)) as u64)
            };
            let (s, e) = (at(i), at(i + 1));
            let cur = match b {
                Some(b) => *b,
                None => Bucket {
                    allocated_max: last.allocated_end,
                    reserved_max: last.reserved_end,
                    allocated_end: last.allocated_end,
                    reserved_end: last.reserved_end,
                    ..Bucket::default()
                },
            };
            last = cur;
            c.report.timeline.push(Bucket {
                start_ns: s,
                end_ns: e,
                ..cur
            });
        }
        self.devices.push(c.report);
        Ok(())
    }
}
