//! The device ledger: at the failure (or, for a run that did not fail, at the peak of the
//! device that held the most), every byte of the failing device by holder — each
//! framework pool and allocator of the failing process (with in use / free inside /
//! largest free block where the framework states them), its driver allocations outside
//! any pool, the context and module memory no allocation call shows, the other
//! processes, and free memory — summed against the device's total within a stated
//! tolerance, naming what could not be attributed. Each holder carries its trend up to
//! that moment where the evidence shows one (bytes per step, else per second).
//!
//! - `held`: what the capture's live set held at an instant, by process and kind of
//!   memory (one pass over the allocations live then, no refold);
//! - `samples`: device samples (nvidia-smi, or the capture's own NVML readings) matched
//!   to an instant of the capture's clock.
//!
//! The kinds read the ledger (`Ctx::ledger`); `unexplained` is left for a ledger that
//! does not close.

mod held;
mod pre_attach;
mod samples;

use super::evidence::Evidence;
use super::facts::{DriverFacts, PjrtFacts};
use super::failure::{Failure, Origin};
use crate::capture::devices::MemoryKind;
use crate::log::LogReport;
use crate::size::format_bytes as b;
use serde::Serialize;
use std::collections::BTreeMap;

pub use held::Held;
pub use samples::{matched_sample, MatchedSample};

/// Who holds a part of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HolderKind {
    /// XLA's BFC pool (one VMM handle of the allocator's pool size).
    XlaBfcPool,
    /// XLA's `cuda_async` stream-ordered pool.
    XlaAsyncPool,
    /// XLA's other device allocations (its `platform` allocator, pool regions grown on
    /// demand, small driver buffers).
    XlaDriver,
    /// PyTorch's caching allocator (`cudaMalloc` segments).
    TorchCaching,
    /// PyTorch's caching allocator with `expandable_segments` (VMM handles).
    TorchExpandable,
    /// CuPy's memory pool (`cuMemAlloc`).
    CupyPool,
    /// Stream-ordered pool memory of no known framework.
    StreamPool,
    /// VMM handles of no known framework (NCCL's cuMem buffers, VMM allocators).
    Vmm,
    /// `cudaMalloc` / `cuMemAlloc` outside any framework's pool.
    Driver,
    /// Managed (unified) memory.
    Managed,
    /// Another process recorded in the capture.
    OtherProcess,
    /// Processes the capture did not record, as the device samples or a framework's
    /// message show them.
    OtherProcessUnrecorded,
    /// The recorded processes' contexts, modules and runtime memory: in use on the device
    /// per the samples or the framework, made by no allocation call the capture sees.
    ContextAndModules,
    /// A framework pool a late attach found already made (the shim's pre-attach marker):
    /// no allocation call in the capture shows it.
    PreAttachPool,
    /// Device memory not in use.
    Free,
    /// In use, but no evidence says by whom.
    Unattributed,
}

/// Growth of a holder up to the ledger's moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trend {
    /// Bytes added per step (per `unit`).
    pub bytes_per_unit: u64,
    /// `execute of NAME`, `allocation of N B` (one size over and over), `group of N
    /// allocations`, `snapshot step`, `second`.
    pub unit: String,
    /// Steps in the unbroken run (0 for `second`).
    pub steps: u64,
    /// Seconds from the run's first growth to the ledger's moment (ms).
    pub span_ms: u64,
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub kind: HolderKind,
    pub pid: Option<u32>,
    /// For people: `pid 123 XLA BFC pool`.
    pub name: String,
    pub bytes: u64,
    /// Bytes the framework handed out inside it (pool in use, PyTorch allocated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_use_bytes: Option<u64>,
    /// Free inside it (pool free, PyTorch cached but unallocated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_inside_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_free_block_bytes: Option<u64>,
    /// Allocation calls that made it (capture holders).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocations: Option<u64>,
    /// Where the figure comes from.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trend: Option<Trend>,
}

/// The ledger of one device at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ledger {
    /// The process the moment belongs to (the failing one).
    pub pid: Option<u32>,
    pub device: i32,
    /// `failure` or `peak` (a run that did not fail).
    pub moment: String,
    /// ns since the capture's start (`None`: no capture).
    pub at_ns: Option<u64>,
    pub total_bytes: Option<u64>,
    /// Where the total comes from.
    pub total_source: Option<String>,
    /// Holders, largest first, `free` last.
    pub holders: Vec<Holder>,
    /// The sum of the holders.
    pub accounted_bytes: u64,
    /// How far the sum may be from the total and still close (and how large the memory
    /// no allocation call shows may be and still count as context and modules).
    pub tolerance_bytes: u64,
    /// Whether the holders account for the device's total within the tolerance, with
    /// nothing left unattributed beyond it.
    pub closes: bool,
    /// What is in use but not attributed to any holder (`None`: nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unattributed_bytes: Option<u64>,
    /// The evidence that would close it (when it does not).
    pub missing: Vec<String>,
    /// The device sample the moment was matched to: ms between it and the moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample_offset_ms: Option<i64>,
}

/// Samples up to the moment the memory outside the capture is taken from (their median).
const SAMPLES_NEAR: usize = 5;

/// The tolerance: 1% of the device's total per process recorded on it (each process's
/// context and modules, which no allocation call shows, are about 0.5 GiB on an H100).
pub fn tolerance(total: u64, processes: usize) -> u64 {
    (total / 100).saturating_mul(processes.max(1) as u64)
}

impl Ledger {
    /// The holders of `pid` of `kind`.
    pub fn of(&self, kind: HolderKind) -> impl Iterator<Item = &Holder> {
        self.holders.iter().filter(move |h| h.kind == kind)
    }

    /// Bytes of one kind of holder (summed).
    pub fn bytes_of(&self, kind: HolderKind) -> u64 {
        self.of(kind).map(|h| h.bytes).sum()
    }

    /// Free device memory, when the ledger knows it.
    pub fn free(&self) -> Option<u64> {
        self.of(HolderKind::Free).next().map(|h| h.bytes)
    }

    /// Bytes held by other processes (recorded or not).
    pub fn others(&self) -> u64 {
        self.bytes_of(HolderKind::OtherProcess) + self.bytes_of(HolderKind::OtherProcessUnrecorded)
    }

    /// One line: `sums to X of the Y device total (tolerance Z)` or `does not close: …`.
    pub fn closing_line(&self) -> String {
        match (self.closes, self.total_bytes) {
            (true, Some(t)) => format!(
                "sums to {} of the device's {} total (tolerance {}: 1% of the total per recorded process)",
                b(self.accounted_bytes),
                b(t),
                b(self.tolerance_bytes)
            ),
            (_, total) => {
                let what = match (self.unattributed_bytes, total) {
                    (Some(u), _) => format!("{} unattributed", b(u)),
                    (None, Some(t)) => format!(
                        "{} of the device's {} accounted for",
                        b(self.accounted_bytes),
                        b(t)
                    ),
                    (None, None) => "the device's total is not known".into(),
                };
                format!(
                    "does not close: {what} (missing: {})",
                    if self.missing.is_empty() {
                        "nothing named".to_string()
                    } else {
                        self.missing.join("; ")
                    }
                )
            }
        }
    }
}

/// What the ledger reads.
pub struct Inputs<'a> {
    pub ev: &'a Evidence,
    /// Without a failure: the process whose peak the ledger is taken at (a run that
    /// recovered: its own process), else the one that held the most.
    pub prefer_pid: Option<u32>,
    pub log: &'a LogReport,
    pub pjrt: &'a PjrtFacts,
    pub drivers: &'a DriverFacts,
    pub failure: Option<&'a Failure>,
}

/// The ledger of the failing device at the failure, else of the device that held the
/// most at its peak; `None` when no evidence names a device.
pub fn compute(x: &Inputs<'_>) -> Option<Ledger> {
    let (pid, device, raw, moment) = moment(x)?;
    Some(at(x, pid, device, raw, moment))
}

/// The ledger of `device` at raw ns `raw` (`None`: no capture, the framework's message
/// alone), for process `pid`; `moment` names the instant (`failure`, `peak`, `first
/// refusal`).
pub fn at(x: &Inputs<'_>, pid: Option<u32>, device: i32, raw: Option<u64>, moment: &str) -> Ledger {
    let cap = x.ev.capture.as_ref();
    let torch = x
        .failure
        .and_then(|f| match f.origin {
            Origin::Torch(i) => x.log.torch_ooms.get(i),
            _ => None,
        })
        .or_else(|| {
            x.failure
                .filter(|_| raw.is_none())
                .and_then(|_| x.log.torch_ooms.last())
        });
    let total = device_total(x, pid, device, torch);
    let mut holders: Vec<Holder> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    // What the capture held at the moment, on this device.
    let held = match (cap, raw) {
        (Some(c), Some(t)) => Some(held::at(c, device, pid, t)),
        _ => None,
    };
    if let (Some(h), Some(c)) = (&held, cap) {
        let t = raw.unwrap_or(u64::MAX);
        holders.extend(held::holders(h, c, x, pid, device, t));
        per_second(&mut holders, c, x, pid, device, t);
        let made_before_attach = pre_attach::pools(c, x, &holders, device, t);
        holders.extend(made_before_attach);
    } else if let Some(t) = torch {
        holders.extend(held::torch_message_holders(t, pid));
    }
    let captured: u64 = held.as_ref().map_or(0, |h| h.device_total());
    // In use per the device samples (time-matched), else per the framework's message.
    // The samples given, else the capture's own readings.
    // A sample after the moment only when the capture held the same then (memory
    // released in between, at exit say, is still in use in a lagging reading).
    let usable = |s: &MatchedSample, c: &crate::doctor::evidence::CaptureEvidence| {
        s.offset_ms <= 0 || held::at(c, device, pid, s.raw_ts).device_total() == captured
    };
    // Of the last few samples up to the moment (a reading's time can be off by a sampling
    // period or two while memory changes fast), the one whose memory outside the capture
    // is the median.
    let sample = match (cap, raw) {
        (Some(c), Some(t)) => {
            let own;
            let series =
                if samples::matched_sample(&x.ev.device_samples, c, device, pid, t).is_some() {
                    &x.ev.device_samples
                } else {
                    own = crate::doctor::evidence::capture_series(&c.loaded);
                    &own
                };
            let mut near: Vec<(u64, MatchedSample)> = (0..SAMPLES_NEAR)
                .map_while(|n| samples::nth_sample(series, c, device, pid, t, n))
                .filter(|s| usable(s, c))
                .map(|s| {
                    let outside = s
                        .used
                        .saturating_sub(held::at(c, device, pid, s.raw_ts).device_total());
                    (outside, s)
                })
                .collect();
            near.sort_by_key(|n| n.0);
            let mid = near.len() / 2;
            (!near.is_empty()).then(|| near.swap_remove(mid).1)
        }
        _ => None,
    };
    let tol = total.map_or(0, |t| {
        tolerance(t, held.as_ref().map_or(1, |h| h.recorded()))
    });
    let mut unattributed = None;
    let mut free = None;
    let mut offset = None;
    if let (Some(s), Some(c)) = (&sample, cap) {
        offset = Some(s.offset_ms);
        // The memory no allocation call shows, as the sample saw it against what the
        // capture held at the sample's own instant.
        let then = held::at(c, device, pid, s.raw_ts);
        let outside = s.used.saturating_sub(then.device_total());
        let mut rest = outside;
        // Pools a late attach found made are part of that memory: theirs first, at most
        // what the sample leaves outside the capture.
        let mut before_attach: BTreeMap<u32, u64> = BTreeMap::new();
        for h in holders
            .iter_mut()
            .filter(|h| h.kind == HolderKind::PreAttachPool)
        {
            let take = h.bytes.min(rest);
            rest -= take;
            h.bytes = take;
            h.in_use_bytes = h.in_use_bytes.map(|u| u.min(take));
            h.free_inside_bytes = h.in_use_bytes.map(|u| take - u);
            *before_attach.entry(h.pid.unwrap_or(0)).or_default() += take;
        }
        // Per-process readings: the recorded processes' own context, and the processes
        // the capture did not record.
        if !s.processes.is_empty() {
            let mut ctx_bytes = 0u64;
            for (p, used) in &s.processes {
                match then.process_total(*p) {
                    Some(c) => {
                        let pool = before_attach.get(p).copied().unwrap_or(0);
                        ctx_bytes += used.saturating_sub(c).saturating_sub(pool)
                    }
                    None => {
                        let take = (*used).min(rest);
                        rest -= take;
                        holders.push(other_unrecorded(
                            Some(*p),
                            take,
                            &format!("{} (per-process reading)", s.source),
                        ));
                    }
                }
            }
            let take = ctx_bytes.min(rest);
            rest -= take;
            holders.push(context_holder(take, &s.source));
            if rest > 0 {
                unattributed = Some(rest);
            }
        } else {
            // Without per-process readings: what was in use before the run's first
            // allocation on the device is other processes'.
            let before = s.used_before_run.unwrap_or(0).min(rest);
            if before > 0 {
                rest -= before;
                holders.push(other_unrecorded(
                    None,
                    before,
                    &format!(
                        "{}: in use before the recorded processes' first allocation",
                        s.source
                    ),
                ));
            }
            if rest <= tol {
                holders.push(context_holder(rest, &s.source));
            } else {
                unattributed = Some(rest);
                missing.push("per-process device readings (who held the memory the capture does not show: NVML's per-process used memory, or nvidia-smi --query-compute-apps=timestamp,gpu_bus_id,pid,used_memory)".into());
            }
        }
        if let Some(t) = total {
            let used_now = captured.saturating_add(outside);
            free = Some(t.saturating_sub(used_now));
            // The sample was taken at another instant than the moment (the capture's
            // memory grew since): what it says of the context is at most what the
            // device had left beside the capture's memory at the moment.
            let mut excess = used_now.saturating_sub(t);
            if excess <= tol {
                for h in holders
                    .iter_mut()
                    .filter(|h| h.kind == HolderKind::ContextAndModules)
                {
                    let cut = excess.min(h.bytes);
                    h.bytes -= cut;
                    excess -= cut;
                }
            }
            if used_now > t + tol {
                missing.push(format!(
                    "a consistent reading: the capture's {} and the sample's {} outside it exceed the device's {}",
                    b(captured),
                    b(outside),
                    b(t)
                ));
            }
        }
    } else if let Some(t) = torch {
        // The framework's message: this process's memory, the others', free.
        if let (Some(h), Some(in_use)) = (&held, t.process_in_use_approx_bytes) {
            let mine = h.process_total(pid.unwrap_or(0)).unwrap_or(0);
            holders.push(context_holder(
                in_use.saturating_sub(mine),
                &format!("{}:{} (this process's memory in use)", t.at.file, t.at.line),
            ));
        }
        if held.is_some() {
            for (p, m) in &t.other_processes {
                holders.push(other_unrecorded(
                    Some(*p),
                    *m,
                    &format!("{}:{}", t.at.file, t.at.line),
                ));
            }
        }
        free = t.free_approx_bytes;
        if free.is_none() {
            missing.push("the device's free memory (device samples)".into());
        }
    } else {
        missing.push(if cap.is_some() {
            "device samples at the moment (memory in use on the device by every process: context and module memory, other processes, free)".into()
        } else {
            "a capture (memwatch run: what each process held, by kind of memory) and device samples".into()
        });
    }
    if let Some(f) = free {
        holders.push(Holder {
            kind: HolderKind::Free,
            pid: None,
            name: "free".into(),
            bytes: f,
            in_use_bytes: None,
            free_inside_bytes: None,
            largest_free_block_bytes: None,
            allocations: None,
            source: sample
                .as_ref()
                .map(|s| s.source.clone())
                .or_else(|| torch.map(|t| format!("{}:{}", t.at.file, t.at.line)))
                .unwrap_or_default(),
            trend: None,
        });
    }
    if let Some(u) = unattributed {
        holders.push(Holder {
            kind: HolderKind::Unattributed,
            pid: None,
            name: "unattributed (in use, no evidence says by whom)".into(),
            bytes: u,
            in_use_bytes: None,
            free_inside_bytes: None,
            largest_free_block_bytes: None,
            allocations: None,
            source: sample
                .as_ref()
                .map(|s| s.source.clone())
                .unwrap_or_default(),
            trend: None,
        });
    }
    holders.retain(|h| h.bytes > 0 || h.kind == HolderKind::Free);
    holders.sort_by(|a, b| {
        (
            a.kind == HolderKind::Free,
            a.kind == HolderKind::Unattributed,
            b.bytes,
        )
            .cmp(&(
                b.kind == HolderKind::Free,
                b.kind == HolderKind::Unattributed,
                a.bytes,
            ))
    });
    let accounted: u64 = holders.iter().map(|h| h.bytes).sum();
    if total.is_none() {
        missing.push("the device's total memory".into());
    }
    // It closes when what the evidence attributes (every holder but the unattributed rest)
    // and the free memory come to the device's total within the tolerance: a rest no
    // larger than the tolerance is the tolerance's to absorb, not a gap in the account.
    let rest = unattributed.unwrap_or(0);
    let closes = match total {
        Some(t) => {
            free.is_some() && rest <= tol && accounted.saturating_sub(rest).abs_diff(t) <= tol
        }
        None => false,
    };
    if !closes && free.is_some() && unattributed.is_none() {
        if let Some(t) = total {
            unattributed = Some(t.saturating_sub(accounted));
        }
    }
    let at_ns = cap
        .zip(raw)
        .map(|(c, t)| t.saturating_sub(c.loaded.base_ns()));
    Ledger {
        pid,
        device,
        moment: moment.into(),
        at_ns,
        total_bytes: total,
        total_source: total.map(|_| total_source(x, torch).into()),
        holders,
        accounted_bytes: accounted,
        tolerance_bytes: tol,
        closes,
        unattributed_bytes: unattributed.filter(|u| *u > 0),
        missing: if closes { Vec::new() } else { missing },
        sample_offset_ms: offset,
    }
}

/// The window a holder's growth per second is measured over (the last 10 s, or the run
/// so far when shorter; at least 1 s).
const TREND_WINDOW_NS: u64 = 10_000_000_000;

/// Growth per second of the holders of `pid` whose steps the evidence does not show: what
/// each held at the moment less what it held one window earlier, when it made at least
/// three more allocations and 1 MiB more in that window.
fn per_second(
    holders: &mut [Holder],
    cap: &crate::doctor::evidence::CaptureEvidence,
    x: &Inputs<'_>,
    pid: Option<u32>,
    device: i32,
    raw: u64,
) {
    let Some(pid) = pid else {
        return;
    };
    let window = raw
        .saturating_sub(cap.loaded.base_ns())
        .min(TREND_WINDOW_NS);
    if window < 1_000_000_000
        || !holders
            .iter()
            .any(|h| h.pid == Some(pid) && h.trend.is_none() && h.allocations.is_some())
    {
        return;
    }
    let before = held::by_holder(&held::at(cap, device, Some(pid), raw - window), x, pid);
    for h in holders
        .iter_mut()
        .filter(|h| h.pid == Some(pid) && h.trend.is_none() && h.allocations.is_some())
    {
        // Growth, not one allocation: at least three more allocations than a window ago.
        let (then, n_then) = before.get(&h.kind).copied().unwrap_or((0, 0));
        if h.bytes >= then + (1 << 20) && h.allocations.unwrap_or(0) >= n_then + 3 {
            h.trend = Some(Trend {
                bytes_per_unit: ((h.bytes - then) as u128 * 1_000_000_000 / window as u128) as u64,
                unit: "second".into(),
                steps: 0,
                span_ms: window / 1_000_000,
            });
        }
    }
}

fn context_holder(bytes: u64, source: &str) -> Holder {
    Holder {
        kind: HolderKind::ContextAndModules,
        pid: None,
        name: "context, modules, runtime (made by no call seen)".into(),
        bytes,
        in_use_bytes: None,
        free_inside_bytes: None,
        largest_free_block_bytes: None,
        allocations: None,
        source: source.to_string(),
        trend: None,
    }
}

fn other_unrecorded(pid: Option<u32>, bytes: u64, source: &str) -> Holder {
    Holder {
        kind: HolderKind::OtherProcessUnrecorded,
        pid,
        name: match pid {
            Some(p) => format!("pid {p} (not recorded)"),
            None => "other processes (not recorded)".into(),
        },
        bytes,
        in_use_bytes: None,
        free_inside_bytes: None,
        largest_free_block_bytes: None,
        allocations: None,
        source: source.to_string(),
        trend: None,
    }
}

/// The failing (pid, device, raw ns) and `failure`; else the peak of the (process,
/// device) that held the most, and `peak`.
fn moment(x: &Inputs<'_>) -> Option<(Option<u32>, i32, Option<u64>, &'static str)> {
    if let Some(f) = x.failure {
        let dev = f.device.or_else(|| {
            x.failure
                .and_then(|f| match f.origin {
                    Origin::Torch(i) => x.log.torch_ooms.get(i).and_then(|t| t.device),
                    _ => None,
                })
                .or(Some(0))
        })?;
        let raw = x.ev.capture.as_ref().and(f.ts_raw);
        return Some((f.pid, dev, raw, "failure"));
    }
    let ((k, d), v) = x
        .drivers
        .per
        .iter()
        .filter(|((_, d), v)| *d >= 0 && v.peak_bytes > 0)
        .max_by_key(|((k, _), v)| (x.prefer_pid == Some(k.pid), v.peak_bytes))?;
    Some((Some(k.pid), *d, Some(v.peak_ts), "peak"))
}

fn device_total(
    x: &Inputs<'_>,
    pid: Option<u32>,
    device: i32,
    torch: Option<&crate::log::TorchOom>,
) -> Option<u64> {
    x.ev.capture
        .as_ref()
        .and_then(|c| {
            c.loaded
                .processes
                .values()
                .filter(|p| pid.is_none_or(|x| p.pid == x))
                .filter_map(|p| p.devices.get(&device))
                .map(|d| d.total_bytes)
                .find(|t| *t > 0)
        })
        .or_else(|| {
            x.ev.device_samples
                .iter()
                .find(|s| s.device == device)
                .and_then(|s| s.total())
        })
        .or_else(|| torch.and_then(|t| t.total_approx_bytes))
}

fn total_source(x: &Inputs<'_>, torch: Option<&crate::log::TorchOom>) -> &'static str {
    if x.ev
        .capture
        .as_ref()
        .is_some_and(|c| c.loaded.processes.values().any(|p| !p.devices.is_empty()))
    {
        "the capture's device record"
    } else if !x.ev.device_samples.is_empty() {
        "the device samples"
    } else if torch.is_some() {
        "PyTorch's message (two decimals)"
    } else {
        "unknown"
    }
}

/// A holder's name for a kind of memory in a process, from what runs in it.
pub fn holder_kind(kind: MemoryKind, fw: &held::Frameworks) -> HolderKind {
    match kind {
        MemoryKind::FrameworkPool => HolderKind::XlaBfcPool,
        MemoryKind::StreamPool if fw.xla => HolderKind::XlaAsyncPool,
        MemoryKind::StreamPool => HolderKind::StreamPool,
        MemoryKind::Vmm if fw.torch_expandable => HolderKind::TorchExpandable,
        MemoryKind::Vmm if fw.xla_bfc && !fw.torch => HolderKind::XlaBfcPool,
        MemoryKind::Vmm if fw.xla && !fw.torch => HolderKind::XlaDriver,
        MemoryKind::Vmm => HolderKind::Vmm,
        MemoryKind::RuntimeMalloc if fw.torch || !fw.xla => HolderKind::TorchCaching,
        MemoryKind::RuntimeMalloc => HolderKind::Driver,
        MemoryKind::DriverMalloc if fw.cupy => HolderKind::CupyPool,
        MemoryKind::DriverMalloc if fw.xla => HolderKind::XlaDriver,
        MemoryKind::DriverMalloc => HolderKind::Driver,
        MemoryKind::Managed => HolderKind::Managed,
    }
}

/// The label of a holder kind.
pub fn label(kind: HolderKind) -> &'static str {
    match kind {
        HolderKind::XlaBfcPool => "XLA BFC pool",
        HolderKind::XlaAsyncPool => "XLA cuda_async pool",
        HolderKind::XlaDriver => "XLA device allocations outside a BFC pool",
        HolderKind::TorchCaching => "PyTorch caching allocator (cudaMalloc segments)",
        HolderKind::TorchExpandable => "PyTorch caching allocator (expandable segments)",
        HolderKind::CupyPool => "CuPy memory pool",
        HolderKind::StreamPool => "stream-ordered pool",
        HolderKind::Vmm => "VMM handles (cuMemCreate)",
        HolderKind::Driver => "driver allocations outside any pool",
        HolderKind::Managed => "managed memory",
        HolderKind::OtherProcess => "another recorded process",
        HolderKind::OtherProcessUnrecorded => "other processes (not recorded)",
        HolderKind::ContextAndModules => "context, modules and runtime",
        HolderKind::PreAttachPool => "framework pool made before the attach",
        HolderKind::Free => "free",
        HolderKind::Unattributed => "unattributed",
    }
}

#[cfg(test)]
mod tests;
