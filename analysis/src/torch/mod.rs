//! PyTorch memory snapshots (`torch.cuda.memory._record_memory_history()` +
//! `_dump_snapshot()`): read safely and in bounded memory, replayed into allocated and
//! reserved bytes over time, reported, compared, and turned into capture records.
//!
//! Submodules: `pickle` (a reader of plain-data pickles that refuses code, and streams),
//! `scan` (one pass over the file: the segments at the dump, each device's trace stored
//! compactly by `spill`, settings, annotations), `decode` (pickle values to the typed
//! `model`), `stacks` (interned frames and stacks, and their Python site), `replay` (the
//! caching allocator's layout entry by entry, checked against the dump), `report` (what
//! `memwatch report` shows and the OOM doctor reads), `compare` (two snapshots),
//! `records` (capture records for `memwatch import`), `segment_marker` (the dump's
//! segments and blocks as markers of those records).
//!
//! For the OOM doctor: [`scan_path`] then [`report`]; each [`DeviceReport`] has its
//! [`OomReport`]s (request, allocated / reserved / free device bytes, the largest free
//! block of the request's pool, the failing stack, the largest live blocks and bytes by
//! Python line at that moment), and [`SnapshotReport::allocator_settings`] the
//! allocator's configuration (`expandable_segments`, `max_split_size`, the
//! `PYTORCH_CUDA_ALLOC_CONF` text). The memory fraction is not in a snapshot.

pub mod compare;
mod decode;
pub mod model;
pub mod pickle;
pub mod records;
pub mod replay;
pub mod report;
pub mod scan;
pub mod segment_marker;
pub mod spill;
pub mod stacks;
pub mod synth;

use std::path::PathBuf;

pub use compare::{compare, Comparison};
pub use model::{Action, AllocatorSettings};
pub use records::{to_records, ConvertError, ConvertSummary};
pub use report::{
    report, BlockView, DeviceReport, LiveView, OomReport, ReportOptions, SiteBytes, SnapshotReport,
};
pub use scan::{scan_path, scan_reader, Scan};
pub use stacks::{Frame, StackId};

/// Why a snapshot could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{path}: cannot read: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a readable pickle: {error}")]
    Pickle {
        path: PathBuf,
        error: pickle::PickleError,
    },
    #[error("{path}: {what}")]
    Format { path: PathBuf, what: String },
}

/// Whether a file starts like a pickle of protocol 2 or later (PyTorch writes 4 or 5),
/// as opposed to a capture (`MWCAP`).
pub fn looks_like_pickle(first_bytes: &[u8]) -> bool {
    matches!(first_bytes, [0x80, 2..=5, ..])
}
