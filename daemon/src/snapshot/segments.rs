//! `GET /runs/{id}/segments?device=&offset=&segment=`: the caching allocator's segments
//! at the dump of a stored PyTorch snapshot, as `_snapshot()['segments']` has them:
//! each segment (address, size, stream, pool, expandable or not) with its blocks
//! (allocated, pending free, cached free), drawn and listed, largest first, a page of
//! [`PER_PAGE`] at a time; the device's sums over every segment add up to its reserved
//! bytes. Each block's stack is titled by the user's frame, every frame below it.

use std::collections::{BTreeSet, HashMap};

use askama::Template;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::draw::{segments_svg, state_label};
use super::dump::{self, DumpSegment, StateBytes};
use super::stack::StackView;
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::html;
use crate::app::state::AppState;
use crate::render::fmt;
use crate::runs::load_run;

/// Segments listed and drawn per page.
pub(crate) const PER_PAGE: usize = 50;
/// Blocks listed per segment on a page of many segments (one segment's page lists all).
const BLOCKS_LISTED: usize = 100;

#[derive(Deserialize, Default)]
pub(crate) struct SegmentsQ {
    device: Option<i32>,
    offset: Option<usize>,
    /// One segment's address (`0x…`): that segment alone, every block listed.
    segment: Option<String>,
}

pub(crate) struct BlockRow {
    pub address: String,
    pub size: String,
    pub requested: String,
    pub state: &'static str,
    pub color: &'static str,
    pub stack: StackView,
}

pub(crate) struct SegmentRow {
    pub address: String,
    pub size: String,
    pub size_bytes: u64,
    pub stream: u64,
    pub pool: String,
    pub expandable: bool,
    pub allocated: String,
    pub pending_free: String,
    pub free: String,
    pub uncovered: String,
    pub stack: Option<StackView>,
    pub blocks: Vec<BlockRow>,
    /// Blocks not listed here (see the segment's own page).
    pub blocks_more: usize,
    pub block_count: usize,
}

/// A device's sums over all its segments; `allocated + pending_free + free + uncovered
/// = reserved`.
pub(crate) struct DeviceTotals {
    pub segments: usize,
    pub expandable: usize,
    pub blocks: usize,
    pub reserved: u64,
    pub bytes: StateBytes,
}

impl DeviceTotals {
    pub fn of(segs: &[DumpSegment], reserved: u64, bytes: StateBytes) -> Self {
        DeviceTotals {
            segments: segs.len(),
            expandable: segs.iter().filter(|s| s.is_expandable).count(),
            blocks: segs.iter().map(|s| s.blocks.len()).sum(),
            reserved,
            bytes,
        }
    }
    pub fn reserved_text(&self) -> String {
        fmt::bytes_u64(self.reserved)
    }
    pub fn allocated_text(&self) -> String {
        fmt::bytes_u64(self.bytes.allocated)
    }
    pub fn pending_text(&self) -> String {
        fmt::bytes_u64(self.bytes.pending_free)
    }
    pub fn free_text(&self) -> String {
        fmt::bytes_u64(self.bytes.free)
    }
    pub fn uncovered_text(&self) -> String {
        fmt::bytes_u64(self.bytes.uncovered)
    }
}

#[derive(Template)]
#[template(path = "segments.html")]
pub(crate) struct SegmentsPage {
    pub id: i64,
    pub title: String,
    pub device: i32,
    pub devices: Vec<i32>,
    pub totals: DeviceTotals,
    pub svg: String,
    pub rows: Vec<SegmentRow>,
    /// 1-based positions of the first and last segment listed.
    pub first: usize,
    pub last: usize,
    pub prev: Option<usize>,
    pub next: Option<usize>,
    /// One segment's page.
    pub single: bool,
    pub empty: String,
}

pub(crate) async fn page(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<SegmentsQ>,
) -> Result<Response, AppError> {
    let run = load_run(&st, id).await?;
    if !dump::is_snapshot(&st.store, id).await? {
        return Err(AppError::not_found(format!(
            "Run #{id} was not stored from a PyTorch snapshot: it has no allocator segments to show."
        )));
    }
    let title = super::run_title(&st, &run).await?;
    let d = dump::load(&st.store, id).await?;
    let devices: Vec<i32> = d.devices.keys().copied().collect();
    let device = q.device.or_else(|| devices.first().copied()).unwrap_or(0);
    let segs = d.segments(device);
    let (reserved, bytes) = d.totals(device);
    let totals = DeviceTotals::of(segs, reserved, bytes);
    let mut order: Vec<&DumpSegment> = segs.iter().collect();
    order.sort_by(|a, b| {
        b.total_size
            .cmp(&a.total_size)
            .then(a.address.cmp(&b.address))
    });
    let single = match q.segment.as_deref() {
        Some(a) => {
            let addr = a
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    AppError::bad(format!("segment={a:?}: give a segment's address as 0x…"))
                })?;
            order.retain(|s| s.address == addr);
            if order.is_empty() {
                return Err(AppError::not_found(format!(
                    "GPU {device} of run #{id} has no segment at {a}"
                )));
            }
            true
        }
        None => false,
    };
    let offset = q.offset.unwrap_or(0).min(order.len().saturating_sub(1));
    let shown: Vec<&DumpSegment> = order.iter().skip(offset).take(PER_PAGE).copied().collect();
    let listed = if single { usize::MAX } else { BLOCKS_LISTED };
    let mut wanted = BTreeSet::new();
    for s in &shown {
        wanted.extend(s.stack);
        wanted.extend(s.blocks.iter().take(listed).filter_map(|b| b.stack));
    }
    // Tooltips name every drawn block's site.
    let mut drawn = wanted.clone();
    for s in &shown {
        drawn.extend(s.blocks.iter().filter_map(|b| b.stack));
    }
    let frames = dump::stacks(&st.store, id, &drawn).await?;
    let mut views: HashMap<u32, StackView> = HashMap::new();
    let mut view = |n: Option<u32>| -> StackView {
        match n {
            None => StackView::untitled("no stack recorded"),
            Some(n) => views
                .entry(n)
                .or_insert_with(|| match frames.get(&n) {
                    Some(f) => StackView::of(f),
                    None => StackView::untitled("stack not stored"),
                })
                .clone(),
        }
    };
    let site = |n: Option<u32>| -> String {
        n.and_then(|n| frames.get(&n)).map_or_else(
            || "no stack recorded".into(),
            |f| super::stack::site_label(f),
        )
    };
    let svg = segments_svg(&shown, reserved, bytes, &site);
    let rows = shown
        .iter()
        .map(|s| {
            let b = s.bytes();
            SegmentRow {
                address: format!("{:#x}", s.address),
                size: fmt::bytes_u64(s.total_size),
                size_bytes: s.total_size,
                stream: s.stream,
                pool: s.segment_type.clone(),
                expandable: s.is_expandable,
                allocated: fmt::bytes_u64(b.allocated),
                pending_free: fmt::bytes_u64(b.pending_free),
                free: fmt::bytes_u64(b.free),
                uncovered: if b.uncovered > 0 {
                    fmt::bytes_u64(b.uncovered)
                } else {
                    String::new()
                },
                stack: s.stack.map(|n| view(Some(n))),
                blocks: s
                    .blocks
                    .iter()
                    .take(listed)
                    .map(|bl| BlockRow {
                        address: format!("{:#x}", bl.address),
                        size: fmt::bytes_u64(bl.size),
                        requested: fmt::bytes_u64(bl.requested_size),
                        state: state_label(bl.state),
                        color: super::draw::COLORS
                            .iter()
                            .find(|c| c.0 == state_label(bl.state))
                            .map_or("#fff", |c| c.1),
                        // One segment's page lists every frame of its blocks.
                        stack: StackView {
                            open: single,
                            ..view(bl.stack)
                        },
                    })
                    .collect(),
                blocks_more: s.blocks.len().saturating_sub(listed),
                block_count: s.blocks.len(),
            }
        })
        .collect();
    let n = order.len();
    let page = SegmentsPage {
        id,
        title,
        device,
        devices,
        totals,
        svg,
        rows,
        first: if n == 0 { 0 } else { offset + 1 },
        last: (offset + PER_PAGE).min(n),
        prev: (!single && offset > 0).then(|| offset.saturating_sub(PER_PAGE)),
        next: (!single && offset + PER_PAGE < n).then_some(offset + PER_PAGE),
        single,
        empty: if segs.is_empty() {
            format!(
                "No segments of GPU {device} are stored with this run: the snapshot had none on it, or the run was imported by a memwatch older than the segments view (import the file again)."
            )
        } else {
            String::new()
        },
    };
    html(&page)
}
