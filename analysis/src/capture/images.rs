//! Splitting a pid's frames into process images, after loading.
//!
//! `exec` keeps the pid, so one pid can have several `process_start`s. File order does
//! not tell the images apart: `memwatch run` reads each shim connection on its own
//! thread, so the new image's first frames can be written before the old image's last
//! ones. Time does: the old image's shim writes everything, then its `process_end`, and
//! only then execs; the new image exists only after that. So image k holds the pid's
//! frames up to the k-th image's `process_end` (or, if that was lost, the next image's
//! `process_start` anchor), and the last image the rest. Owns this assignment for
//! events, streams, backtraces, VMM mapping handles, failures, markers, drop counts and
//! module maps.

use std::collections::HashMap;

use memwatch_wire::{ModuleMap, ProcessEnd, ProcessStart};

use super::load::{Loaded, PidRecords, ProcKey, ProcessMeta};

/// One split pid: its starts in time order, the end of each image, and the time bounds.
struct Plan {
    starts: Vec<ProcessStart>,
    ends: Vec<Option<ProcessEnd>>,
    /// Image k holds times <= bounds[k] (k < n - 1); the last image the rest.
    bounds: Vec<u64>,
}

impl Plan {
    fn image_of(&self, ts: u64) -> u32 {
        self.bounds.partition_point(|b| *b < ts) as u32
    }

    fn new(r: &PidRecords) -> Self {
        let mut starts = r.starts.clone();
        starts.sort_by_key(|s| s.mono_anchor_ns);
        // A shim that reconnects (its descriptor broke, or the program closed it) repeats
        // its image's `process_start`, anchors included: one image, not an exec.
        starts.dedup_by_key(|s| s.mono_anchor_ns);
        let anchors: Vec<u64> = starts.iter().map(|s| s.mono_anchor_ns).collect();
        let n = starts.len();
        let mut ends: Vec<Option<ProcessEnd>> = vec![None; n];
        for e in &r.ends {
            let k = anchors.partition_point(|a| *a <= e.ts_ns).saturating_sub(1);
            if let Some(slot) = ends.get_mut(k) {
                if slot.as_ref().is_none_or(|x| x.ts_ns < e.ts_ns) {
                    *slot = Some(*e);
                }
            }
        }
        let mut bounds = Vec::with_capacity(n.saturating_sub(1));
        let mut last = 0u64;
        for k in 0..n.saturating_sub(1) {
            let b = match ends.get(k).and_then(|e| e.as_ref()) {
                Some(e) => e.ts_ns,
                None => anchors.get(k + 1).copied().unwrap_or(u64::MAX),
            };
            last = last.max(b);
            bounds.push(last);
        }
        Plan {
            starts,
            ends,
            bounds,
        }
    }
}

/// New stream numbering: (image, device) -> index, created on first use.
#[derive(Default)]
struct Streams {
    list: Vec<(ProcKey, i32)>,
    index: HashMap<(ProcKey, i32), u32>,
}

impl Streams {
    fn get(&mut self, key: ProcKey, device: i32) -> u32 {
        let list = &mut self.list;
        *self.index.entry((key, device)).or_insert_with(|| {
            list.push((key, device));
            (list.len() - 1) as u32
        })
    }
}

/// Splits every pid with several `process_start`s into images (see the module docs)
/// and files the module maps under their images. Returns whether a pid was split (the
/// stream numbering changed).
pub(super) fn split(
    loaded: &mut Loaded,
    records: &HashMap<u32, PidRecords>,
    module_maps: Vec<ModuleMap>,
) -> bool {
    let plans: HashMap<u32, Plan> = records
        .iter()
        .filter(|(_, r)| r.starts.len() >= 2)
        .map(|(pid, r)| (*pid, Plan::new(r)))
        .filter(|(_, p)| p.starts.len() >= 2)
        .collect();
    let image_of = |pid: u32, ts: u64| plans.get(&pid).map_or(0, |p| p.image_of(ts));
    for m in module_maps {
        let key = ProcKey {
            pid: m.pid,
            image: image_of(m.pid, m.ts_ns),
        };
        let known = loaded.modules.entry(key).or_default();
        for x in m.modules {
            if !known.iter().any(|k| k.start == x.start && k.path == x.path) {
                known.push(x);
            }
        }
    }
    if plans.is_empty() {
        return false;
    }

    let old = std::mem::take(&mut loaded.streams);
    let mut streams = Streams::default();
    // Streams of pids that are not split keep their (relative) order, also those
    // without events (a described device).
    let fixed: Vec<Option<u32>> = old
        .iter()
        .map(|&(k, d)| (!plans.contains_key(&k.pid)).then(|| streams.get(k, d)))
        .collect();
    let mut remap = |stream: u32, ts: u64| -> u32 {
        match fixed.get(stream as usize).copied().flatten() {
            Some(s) => s,
            None => {
                let (k, d) = old.get(stream as usize).copied().unwrap_or_default();
                let key = ProcKey {
                    pid: k.pid,
                    image: image_of(k.pid, ts),
                };
                streams.get(key, d)
            }
        }
    };
    for e in loaded.events.iter_mut() {
        e.stream = remap(e.stream, e.ts);
    }
    loaded.backtraces = std::mem::take(&mut loaded.backtraces)
        .into_iter()
        .map(|((s, ts, ptr), f)| ((remap(s, ts), ts, ptr), f))
        .collect();
    loaded.vmm_map_handles = std::mem::take(&mut loaded.vmm_map_handles)
        .into_iter()
        .map(|((s, ts, va), h)| ((remap(s, ts), ts, va), h))
        .collect();
    loaded.streams = streams.list;

    for (pid, plan) in &plans {
        let whole = loaded
            .processes
            .remove(&ProcKey {
                pid: *pid,
                image: 0,
            })
            .unwrap_or_default();
        let r = records.get(pid);
        let n = plan.starts.len();
        let unkept = whole
            .failures_total
            .saturating_sub(whole.failures.len() as u64);
        for (k, s) in plan.starts.iter().enumerate() {
            let image = k as u32;
            let end = plan.ends.get(k).and_then(|e| e.as_ref());
            let failures: Vec<_> = whole
                .failures
                .iter()
                .filter(|f| plan.image_of(f.ts) == image)
                .cloned()
                .collect();
            let failures_total = failures.len() as u64 + if k + 1 == n { unkept } else { 0 };
            let meta = ProcessMeta {
                pid: *pid,
                image,
                ended_by_exec: k + 1 < n,
                ppid: s.ppid,
                argv: s.argv.clone(),
                hostname: s.hostname.clone(),
                shim_version: s.shim_version.clone(),
                mono_anchor_ns: Some(s.mono_anchor_ns),
                wall_anchor_unix_ns: s.wall_anchor_unix_ns,
                starts: 1,
                end_ts: end.map(|e| e.ts_ns),
                exit_code: end.and_then(|e| e.known_exit_code()),
                dropped_events: r
                    .map(|r| {
                        r.drops
                            .iter()
                            .filter(|(ts, _)| plan.image_of(*ts) == image)
                            .map(|(_, d)| *d)
                            .max()
                            .unwrap_or(0)
                    })
                    .unwrap_or(0),
                markers: r.map_or(0, |r| {
                    r.marker_ts
                        .iter()
                        .filter(|ts| plan.image_of(**ts) == image)
                        .count() as u64
                }),
                devices: whole.devices.clone(),
                failures,
                failures_total,
            };
            loaded.processes.insert(ProcKey { pid: *pid, image }, meta);
        }
    }
    true
}
