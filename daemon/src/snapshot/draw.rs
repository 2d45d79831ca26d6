//! The segments drawing: one row per segment, its blocks left to right in address order,
//! coloured by state, each with a tooltip (address, size, state, site); above them one
//! bar of the device's reserved bytes split by state. Pure: no store access.

use std::fmt::Write;

use memwatch_analysis::torch::model::BlockState;

use super::dump::{DumpSegment, StateBytes};
use crate::render::fmt;

const W: f64 = 1100.0;
const LABEL: f64 = 250.0;
const ROW: f64 = 22.0;
const BAR: f64 = 16.0;

/// Fill colour of a block state (the legend's order), and of bytes in no block.
pub(crate) const COLORS: [(&str, &str); 4] = [
    ("allocated", "#0072b2"),
    ("pending free", "#e69f00"),
    ("cached free", "#d9d9d9"),
    ("in no block", "#ffffff"),
];

fn color(s: BlockState) -> &'static str {
    match s {
        BlockState::ActiveAllocated => COLORS[0].1,
        BlockState::ActivePendingFree => COLORS[1].1,
        BlockState::Inactive => COLORS[2].1,
    }
}

pub(crate) fn state_label(s: BlockState) -> &'static str {
    match s {
        BlockState::ActiveAllocated => COLORS[0].0,
        BlockState::ActivePendingFree => COLORS[1].0,
        BlockState::Inactive => COLORS[2].0,
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The drawing of `segments` (each row scaled to its own size), under the device's
/// totals (`reserved`, `bytes`) scaled to the reserved bytes. `site(stack)` names a
/// block's stack for its tooltip.
pub(crate) fn segments_svg(
    segments: &[&DumpSegment],
    reserved: u64,
    bytes: StateBytes,
    site: &dyn Fn(Option<u32>) -> String,
) -> String {
    let plot = W - LABEL - 10.0;
    let h = 60.0 + ROW * segments.len() as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {h}\" width=\"{W}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">"
    );
    // Legend.
    let mut x = LABEL;
    for (name, c) in COLORS {
        let _ = write!(
            s,
            "<rect x=\"{x}\" y=\"4\" width=\"12\" height=\"10\" fill=\"{c}\" stroke=\"#555\" stroke-width=\"0.5\"/><text x=\"{}\" y=\"13\">{name}</text>",
            x + 16.0
        );
        x += 120.0;
    }
    // The device's reserved bytes by state.
    let _ = write!(
        s,
        "<text x=\"4\" y=\"36\" font-weight=\"bold\">reserved {}</text>",
        esc(&fmt::bytes_u64(reserved))
    );
    let mut x = LABEL;
    let parts = [
        (bytes.allocated, COLORS[0]),
        (bytes.pending_free, COLORS[1]),
        (bytes.free, COLORS[2]),
        (bytes.uncovered, COLORS[3]),
    ];
    for (b, (name, c)) in parts {
        if b == 0 || reserved == 0 {
            continue;
        }
        let w = plot * b as f64 / reserved as f64;
        let _ = write!(
            s,
            "<rect x=\"{x:.2}\" y=\"24\" width=\"{w:.2}\" height=\"{BAR}\" fill=\"{c}\" stroke=\"#555\" stroke-width=\"0.5\"><title>{name}: {}</title></rect>",
            esc(&fmt::bytes_u64(b))
        );
        x += w;
    }
    for (i, seg) in segments.iter().enumerate() {
        let y = 50.0 + ROW * i as f64;
        let label = format!(
            "{:#x} {}{}",
            seg.address,
            fmt::bytes_u64(seg.total_size),
            if seg.is_expandable { " exp." } else { "" }
        );
        let _ = write!(s, "<text x=\"4\" y=\"{}\">{}</text>", y + 12.0, esc(&label));
        let _ = write!(
            s,
            "<rect x=\"{LABEL}\" y=\"{y}\" width=\"{plot}\" height=\"{BAR}\" fill=\"{}\" stroke=\"#555\" stroke-width=\"0.5\"/>",
            COLORS[3].1
        );
        let total = seg.total_size.max(1) as f64;
        for b in &seg.blocks {
            let off = b.address.saturating_sub(seg.address) as f64;
            let bx = LABEL + plot * off / total;
            let bw = (plot * b.size as f64 / total).max(0.5);
            let tip = format!(
                "{:#x} {} {}: {}",
                b.address,
                fmt::bytes_u64(b.size),
                state_label(b.state),
                site(b.stack)
            );
            let _ = write!(
                s,
                "<rect x=\"{bx:.2}\" y=\"{y}\" width=\"{bw:.2}\" height=\"{BAR}\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.3\"><title>{}</title></rect>",
                color(b.state),
                esc(&tip)
            );
        }
    }
    s.push_str("</svg>");
    s
}
