//! memwatch's own device readings in a capture (`device_reading` frames, written by the
//! sampler of `memwatch run`, `attach` and `agent`): each device's use and every process's
//! use read at one instant, so the watched processes' bytes and the device's are taken
//! together and "the others" are the device's use minus the watched tree's at that
//! instant — never one figure's maximum set against another's at another time.
//!
//! Owns grouping the readings by device in time order ([`by_device`]), which of the
//! capture's device ordinals each sampled device was ([`capture_ordinals`], by
//! `memwatch_wire::find_device`: UUID, then PCI bus id, then ordinal) and the report's
//! summary ([`summarize`]); the doctor reads them as device samples
//! (`doctor::evidence::capture_device_series`). A capture without readings has no
//! figures here, with the reason when the sampler recorded one ([`OFF_TAG`]): missing,
//! never zero.

use memwatch_wire::{find_device, DeviceIdentity, DeviceReading, ProcessUse};
use serde::Serialize;

use crate::capture::Loaded;

/// Capture tag under which `memwatch run` / `attach` record why there are no readings.
pub const OFF_TAG: &str = "device_readings";

/// One reading as the analysis uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Raw CLOCK_MONOTONIC ns (the events' clock).
    pub ts_ns: u64,
    pub used_bytes: u64,
    pub total_bytes: u64,
    /// The watched tree's bytes at this instant (`None`: the processes were not read,
    /// or a watched process's figure was not available).
    pub watched_bytes: Option<u64>,
    /// Every process on the device (`None`: not read this time).
    pub processes: Option<Vec<ProcessUse>>,
    pub at_failure: bool,
}

impl Reading {
    /// The device's use minus the watched tree's, at this instant: other processes,
    /// and what the driver holds outside any process.
    pub fn others_bytes(&self) -> Option<u64> {
        self.watched_bytes
            .map(|w| self.used_bytes.saturating_sub(w))
    }
}

/// One device's readings, in time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReadings {
    /// The sampler library's device index (NVML: PCI bus order), not a CUDA ordinal.
    pub device: i32,
    pub source: String,
    pub uuid: String,
    pub pci_bus_id: String,
    pub readings: Vec<Reading>,
}

impl DeviceReadings {
    /// The device's identity in canonical form.
    pub fn identity(&self) -> DeviceIdentity {
        DeviceIdentity::new(&self.uuid, &self.pci_bus_id)
    }

    /// Whether any reading listed a process of the watched tree on this device.
    pub fn watched_seen(&self) -> bool {
        self.readings.iter().any(|r| {
            r.processes
                .as_ref()
                .is_some_and(|ps| ps.iter().any(ProcessUse::watched))
        })
    }
}

fn reading(r: &DeviceReading) -> Reading {
    Reading {
        ts_ns: r.ts_ns,
        used_bytes: r.used_bytes,
        total_bytes: r.total_bytes,
        watched_bytes: r.watched_bytes(),
        processes: r.process_list().map(<[ProcessUse]>::to_vec),
        at_failure: r.at_failure(),
    }
}

/// The capture's readings by device (source, then index), each in time order.
pub fn by_device(loaded: &Loaded) -> Vec<DeviceReadings> {
    let mut out: Vec<DeviceReadings> = Vec::new();
    for r in &loaded.device_readings {
        let k = match out
            .iter()
            .position(|d| d.device == r.device && d.source == r.source)
        {
            Some(k) => k,
            None => {
                out.push(DeviceReadings {
                    device: r.device,
                    source: r.source.clone(),
                    uuid: r.uuid.clone(),
                    pci_bus_id: r.pci_bus_id.clone(),
                    readings: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[k].readings.push(reading(r));
    }
    for d in &mut out {
        d.readings.sort_by_key(|r| r.ts_ns);
    }
    out.sort_by(|a, b| (&a.source, a.device).cmp(&(&b.source, b.device)));
    out
}

/// The devices the capture's processes described: (ordinal, identity), each once, by
/// ordinal.
fn described(loaded: &Loaded) -> Vec<(i64, DeviceIdentity)> {
    let mut out: Vec<(i64, DeviceIdentity)> = loaded
        .processes
        .values()
        .flat_map(|p| p.devices.iter())
        .filter(|(o, _)| **o >= 0)
        .map(|(o, m)| (i64::from(*o), m.identity.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// For each of `devices` (the capture's sampled devices, [`by_device`]), the device
/// ordinal the capture's processes knew it by, or `None` when it is none of theirs.
///
/// When the processes recorded identities, each sampled device is matched to them by
/// `memwatch_wire::find_device` (UUID, then PCI bus id, ordinal only where the two share
/// no identity): a process that ran under `CUDA_VISIBLE_DEVICES=1` saw the second GPU as
/// its device 0. A capture without identities (made before the shim recorded them)
/// keeps the older rule: when the events name one device and the readings listed the
/// run's processes on exactly one device, that one is it and the others are none of
/// the run's; otherwise each device is taken for the ordinal equal to its index. A
/// capture whose processes described no device keeps every index.
pub fn capture_ordinals(loaded: &Loaded, devices: &[DeviceReadings]) -> Vec<Option<i32>> {
    let described = described(loaded);
    if described.iter().any(|(_, id)| id.is_known()) {
        return devices
            .iter()
            .map(|d| {
                let id = d.identity();
                let k = find_device(
                    i64::from(d.device),
                    &id,
                    described.iter().map(|(o, i)| (*o, i)),
                )?;
                i32::try_from(described[k].0).ok()
            })
            .collect();
    }
    let mut ordinals: Vec<i32> = loaded
        .streams
        .iter()
        .map(|s| s.1)
        .filter(|d| *d >= 0)
        .collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    let with_run: Vec<usize> = (0..devices.len())
        .filter(|&i| devices[i].watched_seen())
        .collect();
    match (ordinals.as_slice(), with_run.as_slice()) {
        ([ordinal], [k]) => (0..devices.len())
            .map(|i| (i == *k).then_some(*ordinal))
            .collect(),
        _ => devices.iter().map(|d| Some(d.device)).collect(),
    }
}

/// The readings of a capture as `memwatch report` shows them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadingsSummary {
    /// `recorded`, or `missing` (a capture made without the sampler, or with no
    /// library or device to read).
    pub status: &'static str,
    /// Why they are missing, when the capture says (`NVML not available: …`).
    pub missing_why: Option<String>,
    pub devices: Vec<DeviceSummary>,
}

/// One device's readings, summed up. Seconds count from the capture's start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceSummary {
    /// The sampler library's index.
    pub device: i32,
    /// The device ordinal the capture's processes knew it by ([`capture_ordinals`]);
    /// `None`: none of theirs.
    pub ordinal: Option<i32>,
    pub source: String,
    pub uuid: String,
    pub pci_bus_id: String,
    pub total_bytes: u64,
    pub readings: u64,
    /// Readings taken at once because a failed allocation arrived.
    pub at_failure: u64,
    pub first_s: f64,
    pub last_s: f64,
    /// The longest time between two consecutive readings, ms (`None` with one reading).
    pub max_gap_ms: Option<f64>,
    pub used_min_bytes: u64,
    pub used_max_bytes: u64,
    /// Whether the watched processes were ever listed on this device.
    pub watched_seen: bool,
    /// The watched tree's largest use, as the device's library counted it.
    pub watched_peak_bytes: Option<u64>,
    /// The largest "device use minus the watched tree's" over the readings, when it was
    /// taken, and the watched tree's bytes at that same instant (`None`: no reading
    /// had the processes).
    pub others_peak_bytes: Option<u64>,
    pub others_peak_at_s: Option<f64>,
    pub watched_at_others_peak_bytes: Option<u64>,
    /// The processes outside the watched tree at that instant: (pid, bytes; `None`
    /// when the library had no figure).
    pub others_at_peak: Vec<(u32, Option<u64>)>,
}

/// The time readings count from: the capture's start (`Loaded::base_ns`), or the first
/// reading in a capture with no process and no event.
pub fn time_base(loaded: &Loaded) -> u64 {
    if loaded.processes.is_empty() && loaded.min_event_ts.is_none() {
        if let Some(first) = loaded.device_readings.iter().map(|r| r.ts_ns).min() {
            return first;
        }
    }
    loaded.base_ns()
}

fn secs(ns: u64, base: u64) -> f64 {
    ns.saturating_sub(base) as f64 / 1e9
}

/// The summary of a capture's readings.
pub fn summarize(loaded: &Loaded) -> ReadingsSummary {
    let devices = by_device(loaded);
    let ordinals = capture_ordinals(loaded, &devices);
    let base = time_base(loaded);
    let missing_why = loaded
        .tags
        .get(OFF_TAG)
        .map(|v| v.strip_prefix("off: ").unwrap_or(v).to_string());
    let devices: Vec<DeviceSummary> = devices
        .iter()
        .zip(&ordinals)
        .filter_map(|(d, ordinal)| {
            let first = d.readings.first()?;
            let last = d.readings.last()?;
            let peak = d
                .readings
                .iter()
                .filter_map(|r| Some((r.others_bytes()?, r)))
                .max_by_key(|(o, r)| (*o, std::cmp::Reverse(r.ts_ns)));
            Some(DeviceSummary {
                device: d.device,
                ordinal: *ordinal,
                source: d.source.clone(),
                // In the one form (a capture's older readings hold NVML's own).
                uuid: d.identity().uuid,
                pci_bus_id: d.identity().pci_bus_id,
                total_bytes: d.readings.iter().map(|r| r.total_bytes).max().unwrap_or(0),
                readings: d.readings.len() as u64,
                at_failure: d.readings.iter().filter(|r| r.at_failure).count() as u64,
                first_s: secs(first.ts_ns, base),
                last_s: secs(last.ts_ns, base),
                max_gap_ms: d
                    .readings
                    .windows(2)
                    .map(|w| w[1].ts_ns - w[0].ts_ns)
                    .max()
                    .map(|g| g as f64 / 1e6),
                used_min_bytes: d.readings.iter().map(|r| r.used_bytes).min().unwrap_or(0),
                used_max_bytes: d.readings.iter().map(|r| r.used_bytes).max().unwrap_or(0),
                watched_seen: d.watched_seen(),
                watched_peak_bytes: d.readings.iter().filter_map(|r| r.watched_bytes).max(),
                others_peak_bytes: peak.map(|p| p.0),
                others_peak_at_s: peak.map(|p| secs(p.1.ts_ns, base)),
                watched_at_others_peak_bytes: peak.and_then(|p| p.1.watched_bytes),
                others_at_peak: peak
                    .and_then(|p| p.1.processes.as_ref())
                    .map(|ps| {
                        ps.iter()
                            .filter(|x| !x.watched())
                            .map(|x| (x.pid, x.bytes()))
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect();
    ReadingsSummary {
        status: if devices.is_empty() {
            "missing"
        } else {
            "recorded"
        },
        missing_why: if devices.is_empty() {
            missing_why
        } else {
            None
        },
        devices,
    }
}
