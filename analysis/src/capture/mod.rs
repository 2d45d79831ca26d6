//! Capture analysis: load a `.mwcap` file and turn it into per-process, per-device
//! memory statistics (`memwatch report`) or a JSON-lines allocation trace
//! (`memwatch report --trace`).
//!
//! Submodules: `load` (streaming, damage-tolerant reading into compact events),
//! `fold` (the same loading, and the report's fold, while a capture is being written),
//! `images` (a pid's frames split into exec'd images, by time), `devices` (each
//! process's devices side by side: peaks by kind, the framework's own figures, NVML),
//! `stats` (counts, peaks, leaks, failures, API durations and overlap), `codes` (result
//! code names per API family), `symbolize` (sampled native stacks -> module, offset,
//! symbol), `trace` (trace export). Nothing here prints or exits.

mod api_table;
pub mod codes;
pub mod devices;
pub mod fold;
mod images;
pub mod load;
pub mod stats;
pub mod symbolize;
pub mod trace;

pub use codes::result_name;
pub use fold::{CaptureFold, FoldStats, Folded, GaveUp, WireSize};
pub use load::{load_path, load_reader, DamageReport, Family, FileFacts, Loaded, ProcKey};
pub use stats::{
    analyze, analyze_with, ApiStats, CaptureReport, DeviceReport, ProcessReport, ReportFold,
    ReportOptions, VmmReferenceReleases,
};
pub use trace::{write_trace, TraceOptions, TraceSummary};

use std::path::PathBuf;

/// Why a capture could not be loaded at all (damage inside a capture is not an error:
/// it is reported in [`Loaded::damage`]).
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{path}: cannot read: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: {error}")]
    NotACapture {
        path: PathBuf,
        error: memwatch_wire::WireError,
    },
    #[error("{path}: at byte {offset}: {message}")]
    Read {
        path: PathBuf,
        offset: u64,
        message: String,
    },
}
