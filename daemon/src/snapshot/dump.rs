//! What a stored PyTorch snapshot run says about its dump, read back from the markers
//! `memwatch_analysis::torch::records` wrote: the segments and blocks
//! (`torch.segment`), the stacks they name (`torch.stack N`), and whether a run is a
//! snapshot at all. Markers are read page by page (bounded memory per page).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use memwatch_analysis::torch::model::BlockState;
use memwatch_analysis::torch::records::parse_stack_marker;
use memwatch_analysis::torch::segment_marker::{parse_segment_marker, BlockLine};
use memwatch_analysis::torch::Frame;

use crate::codes;
use crate::db::{Store, StoreError};

/// Marker rows read per query.
const PAGE: i64 = 512;

/// Whether run `run` was stored from a PyTorch snapshot (`memwatch import SNAPSHOT`).
pub(crate) async fn is_snapshot(store: &Store, run: i64) -> Result<bool, StoreError> {
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM processes WHERE run_id = $1 AND argv LIKE $2")
            .bind(run)
            .bind(codes::snapshot_argv_pattern())
            .fetch_one(&store.pool)
            .await?;
    Ok(n > 0)
}

/// Calls `each` with the text of every marker of `run` starting with `prefix`, in the
/// order stored, until it returns `false`.
async fn markers(
    store: &Store,
    run: i64,
    prefix: &str,
    mut each: impl FnMut(&str) -> bool,
) -> Result<(), StoreError> {
    let mut after = 0i64;
    let pattern = format!("{prefix}%");
    loop {
        let rows: Vec<(i64, String)> = sqlx::query_as(
            "SELECT id, text FROM annotations WHERE run_id = $1 AND id > $2 AND text LIKE $3 \
             ORDER BY id LIMIT $4",
        )
        .bind(run)
        .bind(after)
        .bind(&pattern)
        .bind(PAGE)
        .fetch_all(&store.pool)
        .await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = last.0;
        for (_, t) in &rows {
            if !each(t) {
                return Ok(());
            }
        }
    }
}

/// One segment at the dump with its blocks (address order).
#[derive(Debug, Clone)]
pub(crate) struct DumpSegment {
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub segment_type: String,
    pub is_expandable: bool,
    pub stack: Option<u32>,
    pub blocks: Vec<BlockLine>,
}

/// Bytes of a segment (or a device) by block state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StateBytes {
    /// `active_allocated`: held by the program (`memory_allocated()`).
    pub allocated: u64,
    /// `active_pending_free`: released by the program, waiting for its streams.
    pub pending_free: u64,
    /// `inactive`: cached free space.
    pub free: u64,
    /// Of the segment, in no block (never in PyTorch's own snapshots).
    pub uncovered: u64,
}

impl StateBytes {
    pub fn add(&mut self, o: StateBytes) {
        self.allocated += o.allocated;
        self.pending_free += o.pending_free;
        self.free += o.free;
        self.uncovered += o.uncovered;
    }
}

impl DumpSegment {
    pub fn bytes(&self) -> StateBytes {
        let mut s = StateBytes::default();
        for b in &self.blocks {
            match b.state {
                BlockState::ActiveAllocated => s.allocated += b.size,
                BlockState::ActivePendingFree => s.pending_free += b.size,
                BlockState::Inactive => s.free += b.size,
            }
        }
        let covered = s.allocated + s.pending_free + s.free;
        s.uncovered = self.total_size.saturating_sub(covered);
        s
    }
}

/// The dump of a snapshot run: segments per device (address order).
#[derive(Debug, Default)]
pub(crate) struct Dump {
    pub devices: BTreeMap<i32, Vec<DumpSegment>>,
}

impl Dump {
    /// Segments of `device` (none: empty).
    pub fn segments(&self, device: i32) -> &[DumpSegment] {
        self.devices.get(&device).map_or(&[], Vec::as_slice)
    }

    /// (reserved: the segments' bytes, their bytes by block state) of `device`.
    pub fn totals(&self, device: i32) -> (u64, StateBytes) {
        let mut s = StateBytes::default();
        let mut reserved = 0;
        for seg in self.segments(device) {
            reserved += seg.total_size;
            s.add(seg.bytes());
        }
        (reserved, s)
    }
}

/// The segments at the dump of a stored snapshot run (empty when it has none, e.g. a
/// run stored by an older `memwatch import`).
pub(crate) async fn load(store: &Store, run: i64) -> Result<Dump, StoreError> {
    let mut dump = Dump::default();
    let mut open: HashMap<(i32, u64), usize> = HashMap::new();
    markers(store, run, "torch.segment ", |t| {
        let Some(p) = parse_segment_marker(t) else {
            return true;
        };
        let segs = dump.devices.entry(p.device).or_default();
        match (p.part, open.get(&(p.device, p.address))) {
            (0, _) | (_, None) => {
                open.insert((p.device, p.address), segs.len());
                segs.push(DumpSegment {
                    address: p.address,
                    total_size: p.total_size,
                    stream: p.stream,
                    segment_type: p.segment_type,
                    is_expandable: p.is_expandable,
                    stack: p.stack,
                    blocks: p.blocks,
                });
            }
            (_, Some(&i)) => segs[i].blocks.extend(p.blocks),
        }
        true
    })
    .await?;
    for segs in dump.devices.values_mut() {
        segs.sort_by_key(|s| s.address);
    }
    Ok(dump)
}

/// The frames (innermost first) of the stacks numbered in `wanted`.
pub(crate) async fn stacks(
    store: &Store,
    run: i64,
    wanted: &BTreeSet<u32>,
) -> Result<HashMap<u32, Vec<Frame>>, StoreError> {
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    // Stops once every wanted stack is read.
    markers(store, run, "torch.stack ", |t| {
        if let Some((n, frames)) = parse_stack_marker(t) {
            if wanted.contains(&n) {
                out.insert(n, frames);
            }
        }
        out.len() < wanted.len()
    })
    .await?;
    Ok(out)
}

/// For each site label in `names` (as the framework view names them: the site of the
/// stack by `memwatch_analysis::torch::stacks::site_of_frames`), the frames of the first
/// stack with that site. Reads stack markers until each name has one.
pub(crate) async fn stacks_of_sites(
    store: &Store,
    run: i64,
    names: &BTreeSet<String>,
) -> Result<HashMap<String, Vec<Frame>>, StoreError> {
    let mut out: HashMap<String, Vec<Frame>> = HashMap::new();
    if names.is_empty() {
        return Ok(out);
    }
    markers(store, run, "torch.stack ", |t| {
        if let Some((_, frames)) = parse_stack_marker(t) {
            let label = super::stack::site_label(&frames);
            if names.contains(&label) {
                out.entry(label).or_insert(frames);
            }
        }
        out.len() < names.len()
    })
    .await?;
    Ok(out)
}
