//! What the runs feature answers: nodes with their devices and latest samples, runs with
//! their per-device counters, a run's processes and annotations. Serialized as the JSON
//! API shows them (field order is the documents' order).

use serde::Serialize;

#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct DeviceRow {
    /// Its `devices` row (its samples are stored against it).
    #[serde(skip)]
    pub id: i64,
    /// The node's index of the device (its sampler's), else the ordinal a process saw.
    pub ordinal: i64,
    pub vendor: String,
    pub name: String,
    pub total_bytes: i64,
    /// UUID and PCI bus id as the driver said them (`null`: not known). Two devices of
    /// one ordinal are two machines' (captures imported under one host name).
    #[serde(serialize_with = "empty_as_null")]
    pub uuid: String,
    #[serde(serialize_with = "empty_as_null")]
    pub pci_bus_id: String,
    /// Latest samples per memory (0 VRAM, 1 GTT): never added together.
    #[sqlx(skip)]
    pub samples: Vec<SampleRow>,
}

/// A text stored as "" when not known, written as `null`.
fn empty_as_null<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    if v.is_empty() {
        s.serialize_none()
    } else {
        s.serialize_str(v)
    }
}

#[derive(Debug, Serialize)]
pub struct SampleRow {
    pub device: i64,
    pub memory: &'static str,
    pub ts_ns: i64,
    pub used_bytes: i64,
    pub total_bytes: i64,
    pub source: String,
}

#[derive(Debug, Serialize)]
pub struct NodeRow {
    pub id: i64,
    pub name: String,
    pub first_seen_unix_ns: i64,
    pub last_seen_unix_ns: i64,
    pub devices: Vec<DeviceRow>,
    pub samples: Vec<SampleRow>,
}

/// Counters and the peak of one device of a run (`peak_ts_ns` relative to the run's start).
#[derive(Debug, Serialize, sqlx::FromRow)]
pub struct RunDevice {
    pub device: i64,
    pub live_bytes: i64,
    pub peak_bytes: i64,
    pub peak_ts_ns: i64,
    pub alloc_count: i64,
    pub free_count: i64,
    pub failed_count: i64,
}

impl RunDevice {
    /// Whether pages show this device: a real device, or the capture's "no device" row
    /// (events made without a current device, ordinal -1) only when it holds memory or
    /// failures.
    pub fn shown(&self) -> bool {
        self.device >= 0 || self.alloc_count > 0 || self.failed_count > 0 || self.peak_bytes > 0
    }

    /// "GPU N", or "no device" for the capture's row of events without one.
    pub fn label(&self) -> String {
        device_label(self.device)
    }
}

/// "GPU N", or "no device" for ordinal -1 (events made without a current device).
pub fn device_label(device: i64) -> String {
    if device < 0 {
        "no device".into()
    } else {
        format!("GPU {device}")
    }
}

#[derive(Debug, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub node: String,
    pub run_key: String,
    pub t0_mono_ns: i64,
    pub wall_anchor_unix_ns: i64,
    pub created_unix_ns: i64,
    pub duration_ns: i64,
    pub event_count: i64,
    pub dropped_events: i64,
    pub devices: Vec<RunDevice>,
}

#[derive(Debug, Serialize)]
pub struct ProcessRow {
    pub pid: i64,
    pub ppid: i64,
    pub hostname: String,
    pub argv: Vec<String>,
    pub exit_code: Option<i64>,
    pub dropped_events: i64,
}

#[derive(Debug, Serialize)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunRow,
    pub processes: Vec<ProcessRow>,
    /// The run's first [`RUN_ANNOTATIONS_INLINE`] annotations in time order; all of them
    /// page by page from `/api/runs/{id}/annotations`.
    pub annotations: Vec<AnnotationRow>,
    /// How many annotations the run has.
    pub annotation_count: i64,
    /// Pass as `cursor` to `/api/runs/{id}/annotations` for those after `annotations`;
    /// `null` when `annotations` holds them all.
    pub annotations_next_cursor: Option<String>,
    pub incidents: i64,
}

/// Annotations inlined in a run's detail (a run with a marker per step has hundreds of
/// thousands; the rest are paged).
pub const RUN_ANNOTATIONS_INLINE: usize = 1000;

/// One page of a run's annotations.
#[derive(Debug, Serialize)]
pub struct AnnotationsPage {
    pub annotations: Vec<AnnotationRow>,
    /// Pass as `cursor` for the next page; `null` at the end.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, Clone, sqlx::FromRow)]
pub struct AnnotationRow {
    pub pid: i64,
    pub tid: i64,
    pub ts_ns: i64,
    pub device: i64,
    pub text: String,
}

/// A run's header and per-device counters, without its annotations (which can number
/// tens of thousands and are read per visible range instead).
pub struct RunLite {
    pub id: i64,
    pub node: String,
    pub run_key: String,
    pub t0: i64,
    pub wall_anchor_unix_ns: i64,
    pub created_unix_ns: i64,
    pub duration_ns: i64,
    pub event_count: i64,
    pub dropped_events: i64,
    /// `peak_ts_ns` relative to the run's start.
    pub devices: Vec<RunDevice>,
}
