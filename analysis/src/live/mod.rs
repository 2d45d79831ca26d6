//! The domain core of live memory: which allocations are live at an instant and how a
//! free releases one.
//!
//! - `family`: [`Family`] (device, pinned host, VMM handle) and [`Step`] (what an event
//!   does), from the memory kind or, when that is `none`, the API;
//! - `set`: [`LiveSet`], the one free-matching rule and the live totals per (process
//!   image, device);
//! - `shards`: the storage of the live allocations (a map in sixteen parts, so that
//!   growing never copies the whole set at once);
//! - `vmm`: when a VMM handle's memory is given back (released and unmapped), and
//!   releases of retained or imported handles ([`HandleRef`]);
//! - `images`: [`ImageClock`], which exec image of a pid a streamed record belongs to;
//! - `history`: [`LiveHistory`], each stream's peaks and the device allocations'
//!   lifetimes a fold leaves behind (what was live at any instant, without folding
//!   again).
//!
//! Every reader of events uses these (report, trace export, `attach --live`, the
//! daemon's ingest, the OOM doctor), so they agree on what was live.

mod family;
mod history;
mod images;
mod set;
mod shards;
mod vmm;

pub use family::{Family, Step};
pub use history::{is_runtime_segment, Allocation, HistoryMark, LiveHistory, StreamPeaks};
pub use images::ImageClock;
pub use set::{is_vmm_map, Change, HandleRef, Held, LiveKey, LiveSet, MemEvent, Totals};

/// One process image: a pid and which of its `process_start`s this is. `exec` keeps
/// the pid and starts a new image (image 1 after the first exec, ...); the old image's
/// memory is released by the exec, so images are analysed as separate processes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct ProcKey {
    pub pid: u32,
    /// 0 for the image the pid started with, N after its N-th exec.
    pub image: u32,
}
