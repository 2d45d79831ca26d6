//! When one device of a multi-device run runs out: how its memory compares with the
//! run's other devices, in the figure that shows the split.
//!
//! A driver-level peak does not always show it: JAX preallocates the same pool on every
//! GPU, so the driver sees equal pools whatever the split. The measure is therefore the
//! framework's own where every process has it — live `jax.Array` bytes (PJRT buffers);
//! PyTorch's reserved segments (`cudaMalloc`) — else driver-level device memory. Each
//! device's figure is its peak up to the failure (a worker that finished earlier keeps
//! its peak), so the failing device's share is what the split gave it.
//!
//! Only a run with one process per device ordinal is a split: processes that share an
//! ordinal share a GPU, or see different GPUs under one ordinal (`CUDA_VISIBLE_DEVICES`
//! per worker), which the capture cannot tell apart.
//!
//! Owns [`Imbalance`] and its computation; `diagnose` adds it to the diagnosis and its
//! share to the failing verdict's figures and headline.

use serde::Serialize;
use std::collections::BTreeMap;

use super::evidence::CaptureEvidence;
use super::facts::{DriverFacts, PjrtFacts};
use super::failure::Failure;
use super::verdict::Verdict;
use crate::live::{is_runtime_segment, Change, LiveSet, ProcKey};
use crate::size::format_bytes as b;

/// What the shares are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Live PJRT buffers (`jax.Array` device storage).
    LiveArrays,
    /// `cudaMalloc` segments (PyTorch's reserved memory).
    RuntimeSegments,
    /// Driver-level device memory (every kind).
    DeviceMemory,
}

impl Measure {
    /// Words for sentences.
    pub fn describe(self) -> &'static str {
        match self {
            Self::LiveArrays => "live jax.Array bytes",
            Self::RuntimeSegments => "reserved cudaMalloc segments (PyTorch's memory_reserved)",
            Self::DeviceMemory => "device memory (driver level)",
        }
    }
}

/// One device of one process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceShare {
    pub pid: u32,
    /// The CUDA/HIP ordinal as the process saw it.
    pub device: i32,
    /// This device ran out.
    pub failed: bool,
    /// The measure's peak up to the failure.
    pub bytes: u64,
    /// Per mille of the run's total of the measure.
    pub share_permille: u64,
    /// Driver-level peak (whole run).
    pub driver_peak_bytes: u64,
    /// The PJRT allocator's `peak_bytes_in_use` up to the failure (JAX), when sampled.
    pub allocator_peak_bytes_in_use: Option<u64>,
    /// Live PJRT buffers' peak up to the failure, when the process had any.
    pub live_arrays_peak_bytes: Option<u64>,
}

/// The split of the run's memory over its devices at the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Imbalance {
    pub measure: Measure,
    pub devices: Vec<DeviceShare>,
    /// The failing device's share, per mille, and what an even split would give it.
    pub failed_share_permille: u64,
    pub even_share_permille: u64,
}

impl Imbalance {
    /// One sentence naming the failing device's share.
    pub fn sentence(&self) -> Option<String> {
        let f = self.devices.iter().find(|d| d.failed)?;
        let total: u64 = self.devices.iter().map(|d| d.bytes).sum();
        let others: Vec<String> = self
            .devices
            .iter()
            .filter(|d| !d.failed)
            .map(|d| format!("device {} (pid {}) {}", d.device, d.pid, b(d.bytes)))
            .collect();
        // Five points above an even split is a split that favoured this device.
        let more = if self.failed_share_permille > self.even_share_permille + 50 {
            format!(
                ", more than an even share ({}%)",
                pct(self.even_share_permille)
            )
        } else {
            String::new()
        };
        Some(format!(
            "Device {} (pid {}) held {}% of the run's {} ({} of {}; {}){more}.",
            f.device,
            f.pid,
            pct(self.failed_share_permille),
            self.measure.describe(),
            b(f.bytes),
            b(total),
            others.join(", ")
        ))
    }

    /// Adds the share to the failing verdict: figures and a sentence in its headline.
    pub fn annotate(&self, v: &mut Verdict) {
        let Some(f) = self.devices.iter().find(|d| d.failed) else {
            return;
        };
        let total: u64 = self.devices.iter().map(|d| d.bytes).sum();
        v.figures
            .insert("split_share_permille".into(), self.failed_share_permille);
        v.figures.insert("split_device_bytes".into(), f.bytes);
        v.figures.insert("split_total_bytes".into(), total);
        v.figures
            .insert("split_devices".into(), self.devices.len() as u64);
        if let Some(s) = self.sentence() {
            v.headline = format!("{} {s}", v.headline);
        }
    }
}

fn pct(permille: u64) -> String {
    let p = permille as f64 / 10.0;
    if p >= 10.0 {
        format!("{p:.0}")
    } else {
        format!("{p:.1}")
    }
}

/// The split, when the failure is on one of several devices holding memory.
pub fn compute(
    cap: &CaptureEvidence,
    failure: &Failure,
    drivers: &DriverFacts,
    pjrt: &PjrtFacts,
) -> Option<Imbalance> {
    let (pid, device) = (failure.pid?, failure.device?);
    let rows: Vec<(ProcKey, i32)> = drivers
        .per
        .iter()
        .filter(|((_, d), v)| *d >= 0 && v.peak_bytes > 0)
        .map(|(k, _)| *k)
        .collect();
    if rows.len() < 2 || !rows.iter().any(|(k, d)| k.pid == pid && *d == device) {
        return None;
    }
    // A split over devices: one process per ordinal. Two processes on one ordinal share
    // a GPU (or, under CUDA_VISIBLE_DEVICES, see different GPUs as the same ordinal: the
    // capture cannot tell, so no split is claimed).
    let mut ordinals: Vec<i32> = rows.iter().map(|r| r.1).collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    if ordinals.len() != rows.len() {
        return None;
    }
    let until_raw = failure.ts_raw.unwrap_or(u64::MAX);
    let until_rt = until_raw.saturating_sub(cap.runtime.origin_ns);
    let walked = peaks_until(cap, &rows, until_raw).unwrap_or_else(|| walk(cap, until_raw));
    let arrays = arrays_peak(pjrt, until_rt);

    let measure = if rows.iter().all(|(k, d)| arrays.contains_key(&(k.pid, *d))) {
        Measure::LiveArrays
    } else if rows
        .iter()
        .all(|r| walked.get(r).is_some_and(|w| w.segments_peak > 0))
    {
        Measure::RuntimeSegments
    } else {
        Measure::DeviceMemory
    };
    let mut devices: Vec<DeviceShare> = rows
        .iter()
        .map(|&(k, d)| {
            let w = walked.get(&(k, d)).copied().unwrap_or_default();
            let live_arrays = arrays.get(&(k.pid, d)).copied();
            let bytes = match measure {
                Measure::LiveArrays => live_arrays.unwrap_or(0),
                Measure::RuntimeSegments => w.segments_peak,
                Measure::DeviceMemory => w.device_peak,
            };
            let allocator_peak = pjrt
                .samples(k.pid, d)
                .iter()
                .filter(|s| s.ts_ns <= until_rt)
                .filter_map(|s| s.peak_bytes_in_use)
                .max();
            DeviceShare {
                pid: k.pid,
                device: d,
                failed: k.pid == pid && d == device,
                bytes,
                share_permille: 0,
                driver_peak_bytes: drivers.per.get(&(k, d)).map_or(0, |v| v.peak_bytes),
                allocator_peak_bytes_in_use: allocator_peak,
                live_arrays_peak_bytes: live_arrays,
            }
        })
        .collect();
    let total: u64 = devices.iter().map(|d| d.bytes).sum();
    if total == 0 {
        return None;
    }
    for d in &mut devices {
        d.share_permille = permille(d.bytes, total);
    }
    devices.sort_by_key(|d| (d.device, d.pid));
    let failed_share_permille = devices.iter().find(|d| d.failed)?.share_permille;
    Some(Imbalance {
        measure,
        even_share_permille: 1000 / devices.len() as u64,
        devices,
        failed_share_permille,
    })
}

fn permille(part: u64, total: u64) -> u64 {
    ((u128::from(part) * 1000 + u128::from(total) / 2) / u128::from(total)) as u64
}

#[derive(Debug, Clone, Copy, Default)]
struct Walked {
    device_peak: u64,
    segments: u64,
    segments_peak: u64,
}

/// The peaks [`walk`] finds for `rows`, read from the fold's history instead of folding
/// the events again: when each row's peaks (device memory, runtime segments) were first
/// reached by `until`, the peak up to `until` is the run's peak. `None` when one was
/// reached later (then only a walk up to `until` tells).
fn peaks_until(
    cap: &CaptureEvidence,
    rows: &[(ProcKey, i32)],
    until: u64,
) -> Option<BTreeMap<(ProcKey, i32), Walked>> {
    let l = &cap.loaded;
    let mut out = BTreeMap::new();
    for row in rows {
        let Some(stream) = l.streams.iter().position(|s| s == row) else {
            out.insert(*row, Walked::default());
            continue;
        };
        let p = cap.live.peaks(stream);
        if p.device_ts > until || p.segments_peak_ts > until {
            return None;
        }
        out.insert(
            *row,
            Walked {
                device_peak: p.device_bytes,
                segments: 0,
                segments_peak: p.segments_peak_bytes,
            },
        );
    }
    Some(out)
}

/// Driver-level and `cudaMalloc`-segment peaks per (process image, device) up to
/// `until` (raw ns), through the one free-matching rule.
fn walk(cap: &CaptureEvidence, until: u64) -> BTreeMap<(ProcKey, i32), Walked> {
    let l = &cap.loaded;
    let mut live: LiveSet<bool> = LiveSet::new();
    let mut out: BTreeMap<(ProcKey, i32), Walked> = BTreeMap::new();
    for e in l.events.iter().take_while(|e| e.ts <= until) {
        let m = l.mem_event(e);
        let segment = is_runtime_segment(&m);
        match live.apply(&m, segment) {
            Change::Alloc {
                family,
                replaced,
                now,
            } if family.on_device() => {
                let (k, d) = l.streams[e.stream as usize];
                if let Some(old) = replaced.filter(|o| o.data) {
                    let w = out.entry((k, old.device)).or_default();
                    w.segments = w.segments.saturating_sub(old.size);
                }
                let w = out.entry((k, d)).or_default();
                w.device_peak = w.device_peak.max(now.device_bytes);
                if segment {
                    w.segments = w.segments.saturating_add(e.size);
                    w.segments_peak = w.segments_peak.max(w.segments);
                }
            }
            Change::Free { family, freed, .. } if family.on_device() && freed.data => {
                let (k, _) = l.streams[e.stream as usize];
                let w = out.entry((k, freed.device)).or_default();
                w.segments = w.segments.saturating_sub(freed.size);
            }
            _ => {}
        }
    }
    out
}

/// Peak of live PJRT buffer bytes per (pid, device) up to runtime ns `until`.
fn arrays_peak(pjrt: &PjrtFacts, until: u64) -> BTreeMap<(u32, i32), u64> {
    // (time, allocation?, size) per (pid, device); frees sort before allocations at one
    // instant.
    type Steps = Vec<(u64, bool, u64)>;
    let mut steps: BTreeMap<(u32, i32), Steps> = BTreeMap::new();
    for buf in pjrt.buffers.iter().filter(|x| x.created <= until) {
        let v = steps.entry((buf.pid, buf.device)).or_default();
        v.push((buf.created, true, buf.size));
        if let Some(f) = buf.freed.filter(|f| *f <= until) {
            v.push((f, false, buf.size));
        }
    }
    steps
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            let (mut now, mut peak) = (0u64, 0u64);
            for (_, alloc, size) in v {
                if alloc {
                    now = now.saturating_add(size);
                    peak = peak.max(now);
                } else {
                    now = now.saturating_sub(size);
                }
            }
            (k, peak)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every real capture bundled (multi-GPU splits, the OOM corpus, H200 runs): the
    /// peaks read from the fold's history are the walk's, at every cut where the history
    /// can tell (the failure's time is one such cut: before, at and after each peak).
    #[test]
    fn peaks_from_the_history_are_those_of_a_walk_up_to_the_same_time() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata");
        let mut captures: Vec<std::path::PathBuf> = Vec::new();
        for dir in ["multi-gpu", "oom-corpus", "oom-corpus-heldout"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
                continue;
            };
            for e in entries.flatten() {
                let c = e.path().join("capture.mwcap");
                if c.is_file() {
                    captures.push(c);
                }
            }
        }
        assert!(captures.len() >= 20, "{} captures", captures.len());
        let (mut compared, mut fell_back, mut segments) = (0, 0, 0);
        for path in &captures {
            let cap = CaptureEvidence::read(path).expect("a capture");
            let rows: Vec<(ProcKey, i32)> = cap.loaded.streams.clone();
            let mut cuts: Vec<u64> = (0..rows.len())
                .flat_map(|i| {
                    let p = cap.live.peaks(i);
                    [p.device_ts, p.segments_peak_ts]
                })
                .flat_map(|t| [t.saturating_sub(1), t, t.saturating_add(1)])
                .collect();
            cuts.push(u64::MAX);
            for until in cuts {
                let walked = walk(&cap, until);
                match peaks_until(&cap, &rows, until) {
                    Some(read) => {
                        compared += 1;
                        for row in &rows {
                            let w = walked.get(row).copied().unwrap_or_default();
                            let r = read.get(row).copied().unwrap_or_default();
                            segments += usize::from(r.segments_peak > 0);
                            assert_eq!(
                                (r.device_peak, r.segments_peak),
                                (w.device_peak, w.segments_peak),
                                "{} {row:?} until {until}",
                                path.display()
                            );
                        }
                    }
                    None => fell_back += 1,
                }
            }
        }
        assert!(
            compared > captures.len() && fell_back > 0 && segments > 0,
            "{compared} compared, {fell_back} walked, {segments} with segments"
        );
    }
}
