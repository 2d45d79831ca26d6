//! What the capture held on one device at one instant, by process and kind of memory
//! (`crate::capture::devices::MemoryKind`, the one classification), from the capture's
//! fold (`LiveHistory::live_before`: one pass over the allocations live then), and the
//! ledger's holders made from it with the frameworks' own figures (PJRT allocator
//! statistics, PyTorch's message or snapshot) and each holder's trend.

use super::{holder_kind, label, Holder, HolderKind, Inputs, Trend};
use crate::capture::devices::{add_pool_sizes, MemoryKind, PoolSizes};
use crate::doctor::evidence::CaptureEvidence;
use crate::doctor::failure::Origin;
use crate::doctor::steps;
use crate::log::TorchOom;
use crate::size::format_bytes as b;
use std::collections::{BTreeMap, BTreeSet};

/// The live set of one device at one instant.
#[derive(Debug, Clone, Default)]
pub struct Held {
    /// (pid, kind) -> (bytes, allocations).
    by: BTreeMap<(u32, MemoryKind), (u64, u64)>,
    /// The processes recorded on the device (with or without memory then).
    recorded: BTreeSet<u32>,
    /// The focus process's allocations by kind: (raw ns, size), in time order.
    focus: BTreeMap<MemoryKind, Vec<(u64, u64)>>,
}

impl Held {
    /// Bytes of every recorded process on the device.
    pub fn device_total(&self) -> u64 {
        self.by.values().map(|v| v.0).sum()
    }

    /// Bytes of `pid` on the device; `None` when the capture did not record it there.
    pub fn process_total(&self, pid: u32) -> Option<u64> {
        self.recorded.contains(&pid).then(|| {
            self.by
                .iter()
                .filter(|((p, _), _)| *p == pid)
                .map(|(_, v)| v.0)
                .sum()
        })
    }

    /// Processes recorded on the device.
    pub fn recorded(&self) -> usize {
        self.recorded.len()
    }

    /// Bytes of one kind of memory of `pid`.
    pub fn kind_bytes(&self, pid: u32, kind: MemoryKind) -> u64 {
        self.by.get(&(pid, kind)).map_or(0, |v| v.0)
    }
}

/// The allocations live on `device` just before the first event after raw ns `raw`.
pub fn at(cap: &CaptureEvidence, device: i32, focus: Option<u32>, raw: u64) -> Held {
    let l = &cap.loaded;
    let mut pools = PoolSizes::default();
    add_pool_sizes(&mut pools, &l.pjrt.stats);
    let mut h = Held::default();
    for (k, d) in &l.streams {
        if *d == device {
            h.recorded.insert(k.pid);
        }
    }
    let pos = l.events.partition_point(|e| e.ts <= raw);
    for p in cap.live.live_before(pos).into_iter().flatten() {
        let e = &l.events[p];
        let (k, d) = l.streams[e.stream as usize];
        if d != device {
            continue;
        }
        let sizes = pools.get(&(k.pid, d)).map_or(&[][..], Vec::as_slice);
        let kind = MemoryKind::of(e.api(), e.mem_kind(), e.size, sizes);
        let v = h.by.entry((k.pid, kind)).or_default();
        v.0 = v.0.saturating_add(e.size);
        v.1 += 1;
        if focus == Some(k.pid) {
            h.focus.entry(kind).or_default().push((e.ts, e.size));
        }
    }
    for v in h.focus.values_mut() {
        v.sort_unstable();
    }
    h
}

/// What runs in a process, as far as the holders' names go.
#[derive(Debug, Clone, Copy, Default)]
pub struct Frameworks {
    pub xla: bool,
    /// XLA's BFC allocator (its statistics state a pool): its VMM handles are its pool's
    /// regions (one at start when preallocated, several grown on demand when not).
    pub xla_bfc: bool,
    pub torch: bool,
    pub torch_expandable: bool,
    pub cupy: bool,
}

impl Frameworks {
    /// What the evidence says runs in `pid` (`failing`: the failing process).
    pub fn of(x: &Inputs<'_>, pid: u32, failing: bool) -> Self {
        let xla = x.pjrt.executables.iter().any(|e| e.pid == pid)
            || x.ev
                .capture
                .as_ref()
                .is_some_and(|c| c.runtime.stats.iter().any(|s| s.pid == pid));
        let torch_failed = x
            .failure
            .is_some_and(|f| matches!(f.origin, Origin::Torch(_) | Origin::TorchSnapshot(_)));
        let torch = failing && (torch_failed || !x.ev.framework_states.is_empty());
        let expandable =
            x.ev.framework_states
                .iter()
                .find_map(|s| s.expandable_segments)
                .unwrap_or_else(|| {
                    x.ev.run
                        .env
                        .get("PYTORCH_CUDA_ALLOC_CONF")
                        .is_some_and(|v| v.replace(' ', "").contains("expandable_segments:True"))
                });
        let xla_bfc = x.ev.capture.as_ref().is_some_and(|c| {
            c.runtime.stats.iter().any(|s| {
                s.pid == pid
                    && s.get(memwatch_wire::PjrtMemoryStats::POOL_BYTES, s.pool_bytes)
                        .is_some_and(|p| p > 0)
            })
        });
        Self {
            xla,
            xla_bfc,
            torch,
            torch_expandable: torch && expandable,
            cupy: failing && !x.log.cupy_ooms.is_empty(),
        }
    }
}

/// The holders the capture shows on the device: the focus process's by kind of memory
/// (with the frameworks' figures and trends), each other recorded process as one.
pub fn holders(
    h: &Held,
    cap: &CaptureEvidence,
    x: &Inputs<'_>,
    pid: Option<u32>,
    device: i32,
    raw: u64,
) -> Vec<Holder> {
    let mut out: Vec<Holder> = Vec::new();
    let src = cap.path();
    let mut others: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut mine: BTreeMap<HolderKind, (u64, u64, Vec<MemoryKind>)> = BTreeMap::new();
    let fw = pid.map(|p| Frameworks::of(x, p, true)).unwrap_or_default();
    for ((p, kind), (bytes, n)) in &h.by {
        if Some(*p) == pid {
            let e = mine.entry(holder_kind(*kind, &fw)).or_default();
            e.0 += bytes;
            e.1 += n;
            e.2.push(*kind);
        } else {
            let e = others.entry(*p).or_default();
            e.0 += bytes;
            e.1 += n;
        }
    }
    let rt = cap.runtime_ts_of(raw);
    for (hk, (bytes, n, kinds)) in mine {
        let p = pid.unwrap_or(0);
        let mut holder = Holder {
            kind: hk,
            pid,
            name: format!("pid {p} {}", label(hk)),
            bytes,
            in_use_bytes: None,
            free_inside_bytes: None,
            largest_free_block_bytes: None,
            allocations: Some(n),
            source: format!("{src} (live allocations at the moment)"),
            trend: None,
        };
        match hk {
            HolderKind::XlaBfcPool | HolderKind::XlaAsyncPool => {
                xla_pool_figures(x, &mut holder, p, device, rt, &src);
            }
            HolderKind::TorchCaching | HolderKind::TorchExpandable => {
                torch_figures(x, &mut holder, device);
            }
            _ => {}
        }
        if holder.trend.is_none() {
            let mut live: Vec<(u64, u64)> = kinds
                .iter()
                .filter_map(|k| h.focus.get(k))
                .flatten()
                .copied()
                .collect();
            live.sort_unstable();
            if let Some(g) = steps::allocation_growth(&live) {
                holder.trend = Some(Trend {
                    bytes_per_unit: g.per_group,
                    unit: if g.period == 1 {
                        format!("allocation of {}", b(g.per_group))
                    } else {
                        format!("group of {} allocations", g.period)
                    },
                    steps: g.repetitions as u64,
                    span_ms: raw.saturating_sub(g.started_ts) / 1_000_000,
                });
            }
        }
        out.push(holder);
    }
    for (p, (bytes, n)) in others {
        let cmd = cap
            .loaded
            .processes
            .values()
            .find(|m| m.pid == p)
            .map(|m| m.argv.join(" "))
            .unwrap_or_default();
        out.push(Holder {
            kind: HolderKind::OtherProcess,
            pid: Some(p),
            name: format!("pid {p} ({})", crate::doctor::clip(&cmd, 40)),
            bytes,
            in_use_bytes: None,
            free_inside_bytes: None,
            largest_free_block_bytes: None,
            allocations: Some(n),
            source: format!("{src} (live allocations at the moment)"),
            trend: None,
        });
    }
    out
}

/// Bytes and allocations of each holder of `pid` in `h` (the same names [`holders`]
/// gives).
pub fn by_holder(h: &Held, x: &Inputs<'_>, pid: u32) -> BTreeMap<HolderKind, (u64, u64)> {
    let fw = Frameworks::of(x, pid, true);
    let mut out: BTreeMap<HolderKind, (u64, u64)> = BTreeMap::new();
    for ((p, kind), (bytes, n)) in &h.by {
        if *p == pid {
            let e = out.entry(holder_kind(*kind, &fw)).or_default();
            e.0 += bytes;
            e.1 += n;
        }
    }
    out
}

/// An XLA pool's figures at runtime ns `rt` (what is in use inside it, free inside, the
/// largest free block; its growth per execute when an executable's steps leak), from the
/// allocator's samples and the PJRT buffers of process `p`; `bytes` is the pool's size.
pub(super) fn xla_pool_figures(
    x: &Inputs<'_>,
    holder: &mut Holder,
    p: u32,
    device: i32,
    rt: u64,
    src: &str,
) {
    let bytes = holder.bytes;
    if let Some(s) = x.pjrt.sample_before(p, device, rt) {
        // The sample can be older than the moment: what is in use then is at
        // least the buffers live at it, and never more than the pool.
        let used = x
            .pjrt
            .in_use_at(p, device, rt)
            .unwrap_or(s.bytes_in_use)
            .min(bytes);
        holder.in_use_bytes = Some(used);
        holder.free_inside_bytes = Some(bytes - used);
        // cuda_async states no largest free block (it reads 0).
        holder.largest_free_block_bytes = s
            .largest_free_block_bytes
            .filter(|l| *l > 0 || used >= bytes)
            .map(|l| l.min(bytes - used));
        holder.source = format!(
            "{src} (live allocations; allocator statistics at {:.3} s, buffers live at the moment)",
            s.ts_ns as f64 / 1e9
        );
    }
    if let Some(l) = steps::execution_leak(x.pjrt, p, device, rt) {
        holder.trend = Some(Trend {
            bytes_per_unit: l.growth_per_step,
            unit: format!("execute of {}", l.executable),
            steps: l.leaked_steps as u64,
            span_ms: 0,
        });
    }
}

/// PyTorch's own figures for its holder: the snapshot's OOM record (exact), else its
/// message (two decimals); the snapshot's steps as the trend.
fn torch_figures(x: &Inputs<'_>, holder: &mut Holder, device: i32) {
    let snap =
        x.ev.framework_states
            .iter()
            .rev()
            .find(|s| s.device == device);
    let msg = x.failure.and_then(|f| match f.origin {
        Origin::Torch(i) => x.log.torch_ooms.get(i),
        _ => None,
    });
    let allocated = snap
        .and_then(|s| s.oom.as_ref().map(|o| o.allocated_bytes))
        .or(msg.and_then(|t| t.allocated_approx_bytes));
    if let Some(a) = allocated {
        // A printed figure has two decimals: it can read above the segments that hold it.
        let a = a.min(holder.bytes);
        holder.in_use_bytes = Some(a);
        holder.free_inside_bytes = Some(holder.bytes - a);
        holder.source = match (snap.filter(|s| s.oom.is_some()), msg) {
            (Some(s), _) => format!("{}; allocated from {}", holder.source, s.source),
            (None, Some(t)) => format!(
                "{}; allocated from {}:{} (as printed)",
                holder.source, t.at.file, t.at.line
            ),
            _ => holder.source.clone(),
        };
    }
    holder.largest_free_block_bytes =
        snap.and_then(|s| s.oom.as_ref().map(|o| o.largest_free_block_bytes));
    if let Some((s, g)) = snap.and_then(|s| Some((s, steps::step_growth(&s.allocated_per_step)?))) {
        let _ = s;
        holder.trend = Some(Trend {
            bytes_per_unit: g.growth_per_step,
            unit: "snapshot step".into(),
            steps: (g.steps - g.first_step) as u64,
            span_ms: 0,
        });
    }
}

/// The holders PyTorch's message alone states (no capture): its reserved memory
/// (allocated and cached), the rest of the process, the other processes.
pub fn torch_message_holders(t: &TorchOom, pid: Option<u32>) -> Vec<Holder> {
    let src = format!("{}:{} (as printed)", t.at.file, t.at.line);
    let mut out = Vec::new();
    let holder = |kind: HolderKind, pid: Option<u32>, name: String, bytes: u64| Holder {
        kind,
        pid,
        name,
        bytes,
        in_use_bytes: None,
        free_inside_bytes: None,
        largest_free_block_bytes: None,
        allocations: None,
        source: src.clone(),
        trend: None,
    };
    let who = pid.map_or("this process".to_string(), |p| format!("pid {p}"));
    if let Some(r) = t.reserved() {
        let mut h = holder(
            HolderKind::TorchCaching,
            pid,
            format!("{who} {}", label(HolderKind::TorchCaching)),
            r,
        );
        h.in_use_bytes = t.allocated_approx_bytes;
        h.free_inside_bytes = t.reserved_unallocated_approx_bytes;
        out.push(h);
        if let Some(u) = t.process_in_use_approx_bytes {
            // Its context is about half a GiB; more is another allocator's memory in the
            // process (another framework's pool, a library's buffers).
            let outside = u.saturating_sub(r);
            let (kind, what) = if outside <= super::tolerance(t.total_approx_bytes.unwrap_or(0), 1)
            {
                (HolderKind::ContextAndModules, "context, modules")
            } else {
                (
                    HolderKind::Driver,
                    "another framework's pool, other libraries, context",
                )
            };
            out.push(holder(
                kind,
                pid,
                format!("{who} outside PyTorch's allocator ({what})"),
                outside,
            ));
        }
    }
    for (p, m) in &t.other_processes {
        out.push(holder(
            HolderKind::OtherProcessUnrecorded,
            Some(*p),
            format!("pid {p}"),
            *m,
        ));
    }
    out
}
