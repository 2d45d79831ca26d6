//! SVG charts of the Incident, XLA module, Gate history and Overview pages, drawn with
//! plotters: horizontal composition bars, the BFC pool's chunk map (address order,
//! in-use chunks coloured by executable, free chunks grey, the failed request to scale),
//! a gate entry's measured-vs-limit history, and a device-usage sparkline.
//!
//! Owns drawing only; the numbers come from the page handlers.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::chart::PALETTE;
use super::fmt;

/// Width of the charts of the Incident, XLA module and Gate pages (they scale to the
/// page).
pub(crate) const PAGE_CHART_W: u32 = 1100;

const INK: RGBColor = RGBColor(40, 40, 40);
const FREE: RGBColor = RGBColor(200, 200, 200);
const BAD: RGBColor = RGBColor(179, 0, 27);
const OK: RGBColor = RGBColor(17, 99, 41);

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("chart drawing failed: {e:?}")
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Horizontal bars: one row per (label, bytes), longest first as given.
pub fn bars(width: u32, rows: &[(String, u64)], color_by_row: bool) -> Result<String, String> {
    let n = rows.len().max(1) as u32;
    let height = 30 + 24 * n;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let max = rows.iter().map(|r| r.1).max().unwrap_or(1).max(1) as f64;
        let label_w = 300i32;
        let value_w = 110i32;
        let plot_w = (width as i32 - label_w - value_w - 20).max(50) as f64;
        let font = ("sans-serif", 13).into_font().color(&INK);
        for (i, (label, b)) in rows.iter().enumerate() {
            let y = 8 + 24 * i as i32;
            root.draw(&Text::new(
                clip(label, 42),
                (label_w - 8, y + 9),
                font.clone().pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
            let w = ((*b as f64 / max) * plot_w).round().max(1.0) as i32;
            let c = if color_by_row {
                PALETTE[i % PALETTE.len()]
            } else {
                PALETTE[0]
            };
            root.draw(&Rectangle::new(
                [(label_w, y + 1), (label_w + w, y + 18)],
                c.filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                fmt::bytes(*b as i64),
                (label_w + w + 6, y + 9),
                font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One chunk of the BFC map: offset from the pool's lowest address, size, in use, owner.
pub struct MapChunk {
    pub offset: u64,
    pub size: u64,
    pub in_use: bool,
    pub owner: String,
}

/// The pool as a strip in address order, plus a second strip with the failed request
/// and the largest free chunk drawn to the same scale, and a legend of owners.
pub fn chunk_map(
    width: u32,
    pool: u64,
    chunks: &[MapChunk],
    request: u64,
    largest_free: u64,
) -> Result<String, String> {
    let mut owners: Vec<(String, u64)> = Vec::new();
    for c in chunks.iter().filter(|c| c.in_use) {
        match owners.iter_mut().find(|o| o.0 == c.owner) {
            Some(o) => o.1 += c.size,
            None => owners.push((c.owner.clone(), c.size)),
        }
    }
    owners.sort_by_key(|o| std::cmp::Reverse(o.1));
    let color_of = |owner: &str| {
        let i = owners.iter().position(|o| o.0 == owner).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    };
    let legend_rows = owners.len() as u32 + 1;
    let height = 150 + 20 * legend_rows;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let font = ("sans-serif", 13).into_font().color(&INK);
        let (x0, x1) = (130i32, width as i32 - 20);
        let span = (x1 - x0) as f64;
        let scale = pool.max(request).max(1) as f64;
        let px = |b: u64| x0 + ((b as f64 / scale) * span).round() as i32;
        root.draw(&Text::new(
            format!("pool ({})", fmt::bytes(pool as i64)),
            (x0 - 8, 24),
            font.clone().pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(err)?;
        root.draw(&Rectangle::new(
            [(x0, 10), (px(pool), 38)],
            RGBColor(240, 240, 240).filled(),
        ))
        .map_err(err)?;
        for c in chunks {
            let (a, b) = (px(c.offset), px(c.offset + c.size).max(px(c.offset) + 1));
            let color = if c.in_use { color_of(&c.owner) } else { FREE };
            root.draw(&Rectangle::new([(a, 10), (b, 38)], color.filled()))
                .map_err(err)?;
            if b - a >= 4 {
                root.draw(&Rectangle::new([(a, 10), (b, 38)], WHITE.stroke_width(1)))
                    .map_err(err)?;
            }
        }
        let row = |y: i32, label: String, bytes: u64, color: RGBColor| -> Result<(), String> {
            root.draw(&Text::new(
                label,
                (x0 - 8, y + 9),
                font.clone().pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
            root.draw(&Rectangle::new(
                [(x0, y), (px(bytes).max(x0 + 1), y + 18)],
                color.filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                fmt::bytes(bytes as i64),
                (px(bytes).max(x0 + 1) + 6, y + 9),
                font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
            Ok(())
        };
        row(54, "failed request".into(), request, BAD)?;
        row(80, "largest free".into(), largest_free, FREE)?;
        let mut y = 120;
        let mut key = |color: RGBColor, text: String| -> Result<(), String> {
            root.draw(&Rectangle::new(
                [(x0, y), (x0 + 14, y + 14)],
                color.filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(
                text,
                (x0 + 22, y + 7),
                font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
            ))
            .map_err(err)?;
            y += 20;
            Ok(())
        };
        for (o, b) in &owners {
            key(
                color_of(o),
                format!("in use: {} ({})", clip(o, 70), fmt::bytes(*b as i64)),
            )?;
        }
        let free: u64 = chunks.iter().filter(|c| !c.in_use).map(|c| c.size).sum();
        let nfree = chunks.iter().filter(|c| !c.in_use).count();
        key(
            FREE,
            format!("free: {nfree} chunk(s), {}", fmt::bytes(free as i64)),
        )?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One gate result: time (unix ns), measured and limit bytes, passed.
pub struct GatePoint {
    pub t: i64,
    pub measured: i64,
    pub limit: i64,
    pub passed: bool,
}

/// Measured (line, pass/fail dots) and limit (dashed) over time for one baseline entry.
pub fn gate_history(width: u32, pts: &[GatePoint]) -> Result<String, String> {
    let height = 220;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (t0, t1) = match (pts.iter().map(|p| p.t).min(), pts.iter().map(|p| p.t).max()) {
            (Some(a), Some(b)) if b > a => (a as f64, b as f64),
            (Some(a), _) => (a as f64 - 3.6e12, a as f64 + 3.6e12),
            _ => (0.0, 1.0),
        };
        let ymax = pts
            .iter()
            .map(|p| p.measured.max(p.limit))
            .max()
            .unwrap_or(1)
            .max(1) as f64
            * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .margin_right(24)
            .x_label_area_size(30)
            .y_label_area_size(84)
            .build_cartesian_2d(t0..t1, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_labels(6)
            .y_labels(5)
            .x_label_formatter(&|x| fmt::wall(*x as i64))
            .y_label_formatter(&|y| fmt::axis_bytes(*y))
            .light_line_style(RGBColor(235, 235, 235))
            .label_style(("sans-serif", 12).into_font().color(&INK))
            .draw()
            .map_err(err)?;
        let mut sorted: Vec<&GatePoint> = pts.iter().collect();
        sorted.sort_by_key(|p| p.t);
        chart
            .draw_series(DashedLineSeries::new(
                sorted.iter().map(|p| (p.t as f64, p.limit as f64)),
                6,
                4,
                BAD.mix(0.7).stroke_width(2),
            ))
            .map_err(err)?
            .label("limit (baseline + allowance)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BAD.stroke_width(2)));
        chart
            .draw_series(LineSeries::new(
                sorted.iter().map(|p| (p.t as f64, p.measured as f64)),
                PALETTE[0].stroke_width(2),
            ))
            .map_err(err)?
            .label("measured")
            .legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], PALETTE[0].stroke_width(2))
            });
        chart
            .draw_series(sorted.iter().map(|p| {
                let c = if p.passed { OK } else { BAD };
                Circle::new((p.t as f64, p.measured as f64), 5, c.filled())
            }))
            .map_err(err)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 12).into_font().color(&INK))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A small used-bytes line over time (`pts`: (t, used, total)), scaled to the total.
pub fn sparkline(width: u32, height: u32, pts: &[(i64, i64, i64)]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (t0, t1) = match (pts.first(), pts.last()) {
            (Some(a), Some(b)) if b.0 > a.0 => (a.0 as f64, b.0 as f64),
            (Some(a), _) => (a.0 as f64 - 1.0, a.0 as f64 + 1.0),
            _ => (0.0, 1.0),
        };
        let top = pts.iter().map(|p| p.2.max(p.1)).max().unwrap_or(1).max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .margin(2)
            .build_cartesian_2d(t0..t1, 0f64..top)
            .map_err(err)?;
        chart
            .draw_series(AreaSeries::new(
                pts.iter().map(|p| (p.0 as f64, p.1 as f64)),
                0.0,
                PALETTE[0].mix(0.25),
            ))
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0 as f64, p.1 as f64)),
                PALETTE[0].stroke_width(1),
            ))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_map_draws_request_and_owners() {
        let chunks = vec![
            MapChunk {
                offset: 0,
                size: 1 << 30,
                in_use: true,
                owner: "jit_normal".into(),
            },
            MapChunk {
                offset: 1 << 30,
                size: 1 << 29,
                in_use: false,
                owner: String::new(),
            },
        ];
        let svg = chunk_map(900, 3 << 29, &chunks, 1 << 31, 1 << 29).unwrap();
        assert!(svg.contains("failed request"));
        assert!(svg.contains("in use: jit_normal (1.00 GiB)"));
        assert!(svg.contains("free: 1 chunk(s), 512.00 MiB"));
    }

    #[test]
    fn gate_history_has_both_lines() {
        let pts = [
            GatePoint {
                t: 1_700_000_000_000_000_000,
                measured: 100,
                limit: 120,
                passed: true,
            },
            GatePoint {
                t: 1_700_000_100_000_000_000,
                measured: 130,
                limit: 120,
                passed: false,
            },
        ];
        let svg = gate_history(800, &pts).unwrap();
        assert!(svg.contains("measured") && svg.contains("limit (baseline + allowance)"));
    }
}
