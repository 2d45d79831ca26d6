//! The one pass over a capture behind the APU section.
//!
//! Owns: which devices are APUs (with their HIP and sysfs figures), and a walk of the
//! events in time order through [`LiveSet`] (the one free-matching rule) that keeps live
//! bytes per [`ApuKind`] and device, gives back what each process held when it ended,
//! notes the shim's figures at every sysfs reading, and judges every out-of-memory
//! failure on an APU against what the device could give.

use std::collections::{BTreeMap, HashMap};

use memwatch_wire::{Api, EventKind};

use super::detect::{is_apu, ApuEvidence};
use super::limits::hip_malloc_limit;
use super::oversized::{is_out_of_memory, OversizedRequest};
use super::{
    Agreement, ApuDevice, ApuKind, Comparison, KindAccount, SysfsView, MIN_COMPARED_BYTES,
};
use crate::capture::{Loaded, ProcKey};
use crate::live::{Change, LiveSet};
use crate::size::{format_bytes, format_signed_bytes};

/// One sysfs reading of a card: both counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    ts: u64,
    vram_used: u64,
    vram_total: u64,
    gtt_used: u64,
    gtt_total: u64,
}

/// What is known of one APU device before the walk.
#[derive(Debug, Clone)]
pub(super) struct ApuInputs {
    device: i32,
    evidence: ApuEvidence,
    name: Option<String>,
    hip_total: Option<u64>,
    host_memory: Option<u64>,
    readings: Vec<Reading>,
}

/// The readings of `device`, in time order (`device_sample` memory 0 = VRAM, 1 = GTT;
/// the two of one reading share a timestamp).
fn readings_of(loaded: &Loaded, device: i32) -> Vec<Reading> {
    let mut by_ts: BTreeMap<u64, Reading> = BTreeMap::new();
    for s in loaded.device_samples.iter().filter(|s| s.device == device) {
        let r = by_ts.entry(s.ts_ns).or_insert(Reading {
            ts: s.ts_ns,
            ..Reading::default()
        });
        match s.memory {
            0 => (r.vram_used, r.vram_total) = (s.used_bytes, s.total_bytes),
            1 => (r.gtt_used, r.gtt_total) = (s.used_bytes, s.total_bytes),
            _ => {}
        }
    }
    by_ts.into_values().collect()
}

/// The APU devices of a capture.
pub(super) fn apu_devices(loaded: &Loaded) -> Vec<ApuInputs> {
    let mut devices: Vec<i32> = loaded
        .processes
        .values()
        .flat_map(|p| p.devices.keys().copied())
        .chain(loaded.device_samples.iter().map(|s| s.device))
        .filter(|d| *d >= 0)
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let mut out = Vec::new();
    for device in devices {
        let metas: Vec<_> = loaded
            .processes
            .values()
            .filter_map(|p| p.devices.get(&device))
            .collect();
        let integrated = if metas.iter().any(|m| m.integrated == Some(true)) {
            Some(true)
        } else if metas.iter().any(|m| m.integrated == Some(false)) {
            Some(false)
        } else {
            None
        };
        let readings = readings_of(loaded, device);
        let totals = readings.last().map(|r| (r.vram_total, r.gtt_total));
        let Some(evidence) = is_apu(integrated, totals) else {
            continue;
        };
        out.push(ApuInputs {
            device,
            evidence,
            name: metas.iter().map(|m| m.name.clone()).find(|n| !n.is_empty()),
            hip_total: metas.iter().map(|m| m.total_bytes).find(|t| *t > 0),
            host_memory: metas.iter().find_map(|m| m.host_memory_bytes),
            readings,
        });
    }
    out
}

/// The shim's figures at one reading.
#[derive(Debug, Clone, Copy)]
struct Observed {
    reading: Reading,
    /// Kinds the driver counts (device, host pinned, host registered).
    mapped: u64,
    managed: u64,
}

#[derive(Default)]
struct KindState {
    allocs: u64,
    live: u64,
    peak: u64,
}

/// Running state of one APU device.
#[derive(Default)]
struct DeviceState {
    kinds: BTreeMap<ApuKind, KindState>,
    total: u64,
    peak: u64,
    peak_ts: u64,
    observed: Vec<Observed>,
    /// Oversized failures with the process image they belong to (for `peak_after`).
    oversized: Vec<(ProcKey, OversizedRequest)>,
}

impl DeviceState {
    fn add(&mut self, kind: ApuKind, size: u64, ts: u64) {
        let k = self.kinds.entry(kind).or_default();
        k.allocs += 1;
        k.live = k.live.saturating_add(size);
        k.peak = k.peak.max(k.live);
        self.total = self.total.saturating_add(size);
        if self.total > self.peak {
            self.peak = self.total;
            self.peak_ts = ts;
        }
    }

    fn sub(&mut self, kind: ApuKind, size: u64) {
        let k = self.kinds.entry(kind).or_default();
        k.live = k.live.saturating_sub(size);
        self.total = self.total.saturating_sub(size);
    }

    fn observe(&mut self, reading: Reading) {
        let live = |k: ApuKind| self.kinds.get(&k).map_or(0, |s| s.live);
        let mapped = ApuKind::ALL
            .iter()
            .filter(|k| k.in_driver_counters())
            .map(|&k| live(k))
            .sum();
        let managed = live(ApuKind::Managed);
        self.observed.push(Observed {
            reading,
            mapped,
            managed,
        });
    }
}

/// Something that happens between events: a process ends, or a card is read.
#[derive(Debug, Clone, Copy)]
enum Tick {
    End(ProcKey),
    Read(usize, Reading),
}

/// The walk and what it yields per APU device.
pub(super) fn account(loaded: &Loaded, devices: &[ApuInputs]) -> Vec<ApuDevice> {
    let base = loaded.base_ns();
    let slot: HashMap<i32, usize> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.device, i))
        .collect();
    let mut state: Vec<DeviceState> = devices.iter().map(|_| DeviceState::default()).collect();

    // Results of failed calls (the compact events do not keep them).
    let mut results: HashMap<(ProcKey, u64, u16, u64), i32> = HashMap::new();
    for (key, p) in &loaded.processes {
        for f in &p.failures {
            results.insert((*key, f.ts, f.api as u16, f.size), f.result);
        }
    }
    // Process ends and readings, in time order (ends first at equal times).
    let mut ticks: Vec<(u64, u8, Tick)> = Vec::new();
    for (key, p) in &loaded.processes {
        if let Some(t) = p.end_ts {
            ticks.push((t, 0, Tick::End(*key)));
        }
    }
    for (i, d) in devices.iter().enumerate() {
        for r in &d.readings {
            ticks.push((r.ts, 1, Tick::Read(i, *r)));
        }
    }
    ticks.sort_by_key(|t| (t.0, t.1));
    let mut next_tick = 0;

    let mut order: Vec<u32> = (0..loaded.events.len() as u32).collect();
    order.sort_by_key(|&i| loaded.events[i as usize].ts);
    let mut live: LiveSet<Option<ApuKind>> = LiveSet::new();

    let run_tick = |tick: Tick,
                    live: &mut LiveSet<Option<ApuKind>>,
                    state: &mut Vec<DeviceState>| {
        match tick {
            Tick::End(proc) => {
                for (_, held) in live.release_process(proc) {
                    if let (Some(kind), Some(&s)) = (held.data, slot.get(&held.device)) {
                        state[s].sub(kind, held.size);
                    }
                }
            }
            Tick::Read(s, reading) => state[s].observe(reading),
        }
    };

    for &i in &order {
        let e = &loaded.events[i as usize];
        while next_tick < ticks.len() && ticks[next_tick].0 < e.ts {
            run_tick(ticks[next_tick].2, &mut live, &mut state);
            next_tick += 1;
        }
        let Some(&(proc, device)) = loaded.streams.get(e.stream as usize) else {
            continue;
        };
        let api = Api::from_u16(e.api);
        let kind = EventKind::from_u8(e.kind);
        if kind == Some(EventKind::AllocFailed) {
            if let (Some(&s), Some(&result)) =
                (slot.get(&device), results.get(&(proc, e.ts, e.api, e.size)))
            {
                if is_out_of_memory(api, result) {
                    let d = &devices[s];
                    let capacity = loaded
                        .processes
                        .get(&proc)
                        .and_then(|p| p.devices.get(&device))
                        .map(|m| m.total_bytes)
                        .filter(|t| *t > 0)
                        .or(d.hip_total)
                        .unwrap_or(0);
                    let os_limit = d
                        .readings
                        .last()
                        .map(|r| hip_malloc_limit(r.vram_total, r.gtt_total));
                    if let Some(r) = OversizedRequest::judge(
                        proc.pid,
                        device,
                        e.start().saturating_sub(base),
                        api,
                        e.size,
                        result,
                        capacity,
                        live.device_bytes(device),
                        os_limit,
                    ) {
                        state[s].oversized.push((proc, r));
                    }
                }
            }
        }
        let data = ApuKind::of(memwatch_wire::MemKind::from_u8(e.mem), api);
        let change = live.apply(&loaded.mem_event(e), data);
        let now = match change {
            Change::Alloc { replaced, now, .. } => {
                if let Some(old) = replaced {
                    if let (Some(k), Some(&s)) = (old.data, slot.get(&old.device)) {
                        state[s].sub(k, old.size);
                    }
                }
                if let (Some(k), Some(&s)) = (data, slot.get(&device)) {
                    state[s].add(k, e.size, e.ts);
                }
                Some(now)
            }
            Change::Free { freed, now, .. } => {
                if let (Some(k), Some(&s)) = (freed.data, slot.get(&freed.device)) {
                    state[s].sub(k, freed.size);
                }
                Some(now)
            }
            _ => None,
        };
        if let (Some(now), Some(&s)) = (now, slot.get(&device)) {
            for (p, r) in state[s].oversized.iter_mut() {
                if *p == proc {
                    r.peak_after_bytes = r.peak_after_bytes.max(now.device_bytes);
                }
            }
        }
    }
    while next_tick < ticks.len() {
        run_tick(ticks[next_tick].2, &mut live, &mut state);
        next_tick += 1;
    }

    devices
        .iter()
        .zip(state)
        .map(|(d, st)| finish(d, st, base))
        .collect()
}

fn finish(d: &ApuInputs, st: DeviceState, base: u64) -> ApuDevice {
    let sysfs = d
        .readings
        .first()
        .zip(d.readings.last())
        .map(|(first, last)| SysfsView {
            readings: d.readings.len() as u64,
            vram_total_bytes: last.vram_total,
            gtt_total_bytes: last.gtt_total,
            hip_malloc_limit_bytes: hip_malloc_limit(last.vram_total, last.gtt_total),
            first_vram_used_bytes: first.vram_used,
            first_gtt_used_bytes: first.gtt_used,
        });
    let kinds = ApuKind::ALL
        .iter()
        .map(|&k| {
            let s = st.kinds.get(&k);
            KindAccount {
                kind: k,
                apis: k.apis(),
                allocs: s.map_or(0, |s| s.allocs),
                peak_bytes: s.map_or(0, |s| s.peak),
                live_bytes_at_end: s.map_or(0, |s| s.live),
            }
        })
        .collect();
    ApuDevice {
        device: d.device,
        name: d.name.clone(),
        evidence: d.evidence,
        hip_total_bytes: d.hip_total,
        host_memory_bytes: d.host_memory,
        sysfs,
        kinds,
        shim_peak_bytes: st.peak,
        shim_peak_ns: st.peak_ts.saturating_sub(base),
        comparison: compare(&st.observed, !d.readings.is_empty(), base),
        oversized_requests: st.oversized.into_iter().map(|(_, r)| r).collect(),
    }
}

/// The shim against the counters, at the reading where they differ the most.
fn compare(observed: &[Observed], had_readings: bool, base: u64) -> Comparison {
    let not_compared = |message: &str| Comparison {
        status: Agreement::NotCompared,
        at_ns: None,
        shim_mapped_bytes: 0,
        shim_growth_bytes: 0,
        shim_managed_bytes: 0,
        sysfs_vram_used_bytes: 0,
        sysfs_gtt_used_bytes: 0,
        sysfs_growth_bytes: 0,
        message: message.to_string(),
    };
    let Some(first) = observed.first() else {
        return not_compared(if had_readings {
            "no sysfs reading fell inside the capture's events"
        } else {
            "no amdgpu sysfs readings in the capture (`memwatch run` takes them when \
             /sys/class/drm has an amdgpu card with memory counters)"
        });
    };
    let first_used = first.reading.vram_used + first.reading.gtt_used;
    let growth = |o: &Observed| {
        let shim = o.mapped.saturating_sub(first.mapped);
        let sysfs = (o.reading.vram_used + o.reading.gtt_used) as i64 - first_used as i64;
        (shim, sysfs)
    };
    let Some(o) = observed
        .iter()
        .filter(|o| {
            let (shim, sysfs) = growth(o);
            shim.max(sysfs.max(0) as u64) >= MIN_COMPARED_BYTES
        })
        .max_by_key(|o| {
            let (shim, sysfs) = growth(o);
            (shim as i128 - sysfs as i128).unsigned_abs()
        })
    else {
        return not_compared(
            "no sysfs reading fell while memory was held (readings are taken at the run's \
             start and end and once a second)",
        );
    };
    let (shim, sysfs) = growth(o);
    let tolerance = MIN_COMPARED_BYTES.max(shim / 4);
    let status = if (sysfs.max(0) as u64) < shim / 2 {
        Agreement::SysfsUnder
    } else if sysfs > (shim + tolerance) as i64 {
        Agreement::SysfsOver
    } else {
        Agreement::Agree
    };
    let at = o.reading.ts.saturating_sub(base);
    let mut message = match status {
        Agreement::SysfsUnder => format!(
            "the shim counted {} more in device, pinned and registered memory than at the \
             first reading, but amdgpu's VRAM+GTT counters moved by {}: they do not follow \
             these allocations here (as reported for Strix Halo, where mem_info_gtt_used \
             stays near 0 after hipMalloc); the shim's figures are the ones to trust",
            format_bytes(shim),
            format_signed_bytes(i128::from(sysfs))
        ),
        Agreement::SysfsOver => format!(
            "amdgpu's VRAM+GTT counters grew by {} but the shim counted {}: memory outside \
             this capture (other programs, the driver, or calls memwatch does not hook)",
            format_signed_bytes(i128::from(sysfs)),
            format_bytes(shim)
        ),
        _ => format!(
            "amdgpu's VRAM+GTT counters follow the shim's accounting (+{} counted, {} in \
             the counters where they differ the most)",
            format_bytes(shim),
            format_signed_bytes(i128::from(sysfs))
        ),
    };
    if o.managed > 0 {
        message.push_str(&format!(
            "; {} of managed memory is system pages outside both counters",
            format_bytes(o.managed)
        ));
    }
    Comparison {
        status,
        at_ns: Some(at),
        shim_mapped_bytes: o.mapped,
        shim_growth_bytes: shim,
        shim_managed_bytes: o.managed,
        sysfs_vram_used_bytes: o.reading.vram_used,
        sysfs_gtt_used_bytes: o.reading.gtt_used,
        sysfs_growth_bytes: sysfs,
        message,
    }
}
