//! Two snapshots side by side (`memwatch report A.pickle --compare B.pickle`): per
//! device, allocated and reserved at the dump and at the peaks, OOMs, and which Python
//! lines hold more or less memory at the allocated peak.

use std::collections::BTreeMap;

use serde::Serialize;

use super::report::{DeviceReport, SnapshotReport};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Delta {
    pub a: u64,
    pub b: u64,
    /// b - a.
    pub delta: i64,
}

impl Delta {
    fn of(a: u64, b: u64) -> Self {
        Delta {
            a,
            b,
            delta: b as i64 - a as i64,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SiteDelta {
    pub site: String,
    pub a: u64,
    pub b: u64,
    pub delta: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DeviceDelta {
    pub device: i32,
    /// Whether each snapshot has this device.
    pub in_a: bool,
    pub in_b: bool,
    pub allocated_bytes: Delta,
    pub reserved_bytes: Delta,
    pub peak_allocated_bytes: Delta,
    pub peak_reserved_bytes: Delta,
    pub ooms: Delta,
    pub segments: Delta,
    pub trace_entries: Delta,
    /// Allocated bytes at each snapshot's allocated peak, by Python line, largest change
    /// first.
    pub sites_at_peak: Vec<SiteDelta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Side {
    pub file: String,
    pub file_bytes: u64,
    pub start_time_unix_us: Option<i64>,
    pub expandable_segments: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub a: Side,
    pub b: Side,
    pub devices: Vec<DeviceDelta>,
}

fn side(r: &SnapshotReport) -> Side {
    Side {
        file: r.file.clone(),
        file_bytes: r.file_bytes,
        start_time_unix_us: r.start_time_unix_us,
        expandable_segments: r.allocator_settings.expandable_segments,
    }
}

/// Compares two reports, listing at most `top` sites per device.
pub fn compare(a: &SnapshotReport, b: &SnapshotReport, top: usize) -> Comparison {
    let mut devices: Vec<i32> = a
        .devices
        .iter()
        .chain(&b.devices)
        .map(|d| d.device)
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let find = |r: &'_ SnapshotReport, d: i32| r.devices.iter().find(|x| x.device == d).cloned();
    let devices = devices
        .into_iter()
        .map(|d| {
            let (da, db) = (find(a, d), find(b, d));
            let get = |r: &Option<DeviceReport>, f: &dyn Fn(&DeviceReport) -> u64| {
                r.as_ref().map_or(0, f)
            };
            let delta = |f: &dyn Fn(&DeviceReport) -> u64| Delta::of(get(&da, f), get(&db, f));
            let mut sites: BTreeMap<String, (u64, u64)> = BTreeMap::new();
            for s in da.iter().flat_map(|r| &r.at_peak.by_site) {
                sites.entry(s.site.clone()).or_default().0 += s.bytes;
            }
            for s in db.iter().flat_map(|r| &r.at_peak.by_site) {
                sites.entry(s.site.clone()).or_default().1 += s.bytes;
            }
            let mut sites: Vec<SiteDelta> = sites
                .into_iter()
                .map(|(site, (a, b))| SiteDelta {
                    site,
                    a,
                    b,
                    delta: b as i64 - a as i64,
                })
                .filter(|s| s.delta != 0)
                .collect();
            sites.sort_by(|x, y| {
                y.delta
                    .unsigned_abs()
                    .cmp(&x.delta.unsigned_abs())
                    .then_with(|| x.site.cmp(&y.site))
            });
            sites.truncate(top);
            DeviceDelta {
                device: d,
                in_a: da.is_some(),
                in_b: db.is_some(),
                allocated_bytes: delta(&|r| r.allocated_bytes),
                reserved_bytes: delta(&|r| r.reserved_bytes),
                peak_allocated_bytes: delta(&|r| r.peak_allocated.bytes),
                peak_reserved_bytes: delta(&|r| r.peak_reserved.bytes),
                ooms: delta(&|r| r.ooms_total),
                segments: delta(&|r| r.segments),
                trace_entries: delta(&|r| r.trace_entries),
                sites_at_peak: sites,
            }
        })
        .collect();
    Comparison {
        a: side(a),
        b: side(b),
        devices,
    }
}
