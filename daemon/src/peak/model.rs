//! What the peak feature answers: the live allocations of a device at an instant (its
//! peak, or any other), grouped four ways, with the largest listed.

use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Group {
    pub key: String,
    pub count: u64,
    pub bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct PeakAlloc {
    pub pid: u32,
    pub tid: u32,
    pub ptr: u64,
    pub size: u64,
    pub ts_ns: u64,
    pub api: &'static str,
    pub mem_kind: &'static str,
    pub annotation: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Peak {
    pub run_id: i64,
    pub device: i64,
    pub peak_bytes: i64,
    /// Relative to the run's start.
    pub peak_ts_ns: i64,
    pub live_allocations: u64,
    pub by_size_class: Vec<Group>,
    pub by_kind: Vec<Group>,
    pub by_thread: Vec<Group>,
    pub by_annotation: Vec<Group>,
    pub largest: Vec<PeakAlloc>,
}
