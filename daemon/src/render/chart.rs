//! SVG charts drawn with plotters: the live-bytes timeline (min/max band per bucket so no
//! peak is hidden, peak / failure / annotation markers) and the API-span lanes.
//!
//! Owns drawing only; the data (timelines, spans) comes from the `runs` feature. Returns
//! the SVG text plus the plot area's pixel range, which the page's drag-to-zoom script
//! needs to map pixels back to time.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::fmt;
use super::Point;

/// Colour-blind-safe palette (Okabe-Ito), dark enough for text contrast on white.
pub const PALETTE: [RGBColor; 4] = [
    RGBColor(0, 94, 184),
    RGBColor(200, 82, 0),
    RGBColor(0, 122, 80),
    RGBColor(150, 60, 150),
];
pub(super) const FAIL: RGBColor = RGBColor(200, 0, 30);
const PEAK: RGBColor = RGBColor(170, 0, 40);
const NOTE: RGBColor = RGBColor(90, 90, 90);

/// One line of a timeline chart.
pub struct Series<'a> {
    pub label: String,
    /// Offset added to every point's time (aligning runs for comparison).
    pub points: &'a [Point],
    pub bucket_ns: u64,
    pub color: RGBColor,
}

/// Markers drawn over the timeline (times relative to the run's start).
#[derive(Default)]
pub struct Marks {
    pub peak: Option<(u64, i64)>,
    pub failures: Vec<u64>,
    pub annotations: Vec<(u64, String)>,
}

/// A rendered chart.
pub struct Rendered {
    pub svg: String,
    /// Pixel x of the plot area's left and right edge.
    pub plot_left: i32,
    pub plot_right: i32,
}

pub(super) type DrawResult<T> = Result<T, String>;

/// The plot area of a bytes-over-time chart: time since the run's start across, bytes
/// up to `ytop`, with the dashboard's margins, grid and labels.
pub(super) fn time_bytes_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    x: std::ops::Range<f64>,
    ytop: f64,
) -> DrawResult<
    ChartContext<
        'a,
        SVGBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
> {
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .margin_top(34)
        .margin_right(24)
        .x_label_area_size(34)
        .y_label_area_size(84)
        .build_cartesian_2d(x, 0f64..ytop)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(8)
        .y_labels(6)
        .x_label_formatter(&|x| fmt::axis_time(*x))
        .y_label_formatter(&|y| fmt::axis_bytes(*y))
        .light_line_style(RGBColor(235, 235, 235))
        .bold_line_style(RGBColor(215, 215, 215))
        .axis_style(RGBColor(80, 80, 80))
        .label_style(("sans-serif", 13).into_font().color(&RGBColor(40, 40, 40)))
        .x_desc("time since run start")
        .axis_desc_style(("sans-serif", 13).into_font().color(&RGBColor(40, 40, 40)))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

pub(super) fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("chart drawing failed: {e:?}")
}

/// Draws the live-bytes timeline over `[from, to)` ns.
pub fn timeline(
    size: (u32, u32),
    from: u64,
    to: u64,
    series: &[Series],
    marks: &Marks,
) -> DrawResult<Rendered> {
    let mut svg = String::new();
    let (l, r);
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        (l, r) = draw_timeline(&root, from, to, series, marks)?;
        root.present().map_err(err)?;
    }
    Ok(Rendered {
        svg,
        plot_left: l,
        plot_right: r,
    })
}

fn draw_timeline(
    root: &DrawingArea<SVGBackend, Shift>,
    from: u64,
    to: u64,
    series: &[Series],
    marks: &Marks,
) -> DrawResult<(i32, i32)> {
    let mut ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.max))
        .max()
        .unwrap_or(0);
    if let Some((t, b)) = marks.peak {
        if t >= from && t < to {
            ymax = ymax.max(b);
        }
    }
    let ytop = (ymax.max(1) as f64) * 1.12;
    let (x0, x1) = (from as f64, to.max(from + 1) as f64);
    let legend = legend_items(series, marks, from, to);
    draw_legend(root, &legend)?;
    let mut chart = time_bytes_chart(root, x0..x1, ytop)?;

    let visible: Vec<&(u64, String)> = marks
        .annotations
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .collect();
    let few = visible.len() <= 12;
    for (i, &&(t, ref text)) in visible.iter().enumerate() {
        if i >= 400 {
            break;
        }
        let x = t as f64;
        let y0 = if few { 0.0 } else { ytop * 0.96 };
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, y0), (x, ytop)],
                NOTE.mix(0.45).stroke_width(1),
            )))
            .map_err(err)?;
        if few {
            chart
                .draw_series(std::iter::once(Text::new(
                    short(text, 24),
                    (x, ytop * 0.99),
                    ("sans-serif", 11).into_font().color(&NOTE),
                )))
                .map_err(err)?;
        }
    }

    for s in series {
        if s.points.is_empty() {
            continue;
        }
        let bw = s.bucket_ns.max(1) as f64;
        let mut upper = Vec::with_capacity(s.points.len() * 2);
        let mut lower = Vec::with_capacity(s.points.len() * 2);
        for p in s.points {
            let a = (p.t_ns as f64).max(x0);
            let b = (p.t_ns as f64 + bw).min(x1);
            upper.push((a, p.max as f64));
            upper.push((b, p.max as f64));
            lower.push((a, p.min as f64));
            lower.push((b, p.min as f64));
        }
        let mut band = upper.clone();
        band.extend(lower.iter().rev().copied());
        chart
            .draw_series(std::iter::once(Polygon::new(
                band,
                s.color.mix(0.22).filled(),
            )))
            .map_err(err)?;
        let color = s.color;
        chart
            .draw_series(LineSeries::new(upper, color.stroke_width(2)))
            .map_err(err)?;
    }

    let fail_y = ytop * 0.94;
    let fails: Vec<(f64, f64)> = marks
        .failures
        .iter()
        .filter(|&&t| t >= from && t < to)
        .take(2000)
        .map(|&t| (t as f64, fail_y))
        .collect();
    if !fails.is_empty() {
        chart
            .draw_series(fails.iter().map(|&(x, y)| {
                PathElement::new(vec![(x, 0.0), (x, y)], FAIL.mix(0.6).stroke_width(1))
            }))
            .map_err(err)?;
        chart
            .draw_series(
                fails
                    .iter()
                    .map(|&c| TriangleMarker::new(c, 7, FAIL.filled())),
            )
            .map_err(err)?;
    }

    if let Some((t, b)) = marks.peak {
        if t >= from && t < to {
            let c = (t as f64, b as f64);
            chart
                .draw_series(std::iter::once(Circle::new(c, 6, PEAK.filled())))
                .map_err(err)?;
            let right_half = (t - from) as f64 > (to - from) as f64 * 0.7;
            let anchor = if right_half { HPos::Right } else { HPos::Left };
            let dx = if right_half {
                -(x1 - x0) * 0.01
            } else {
                (x1 - x0) * 0.01
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("peak {}", fmt::bytes(b)),
                    (c.0 + dx, c.1 + ytop * 0.015),
                    ("sans-serif", 13)
                        .into_font()
                        .color(&PEAK)
                        .pos(Pos::new(anchor, VPos::Bottom)),
                )))
                .map_err(err)?;
        }
    }

    let (xr, _) = chart.plotting_area().get_pixel_range();
    Ok((xr.start, xr.end))
}

pub(super) enum Swatch {
    Band(RGBColor),
    Triangle,
    Dot,
    Tick,
}

fn legend_items(series: &[Series], marks: &Marks, from: u64, to: u64) -> Vec<(Swatch, String)> {
    let mut v: Vec<(Swatch, String)> = series
        .iter()
        .map(|s| (Swatch::Band(s.color), s.label.clone()))
        .collect();
    if let Some((t, b)) = marks.peak {
        let where_ = if t >= from && t < to {
            ""
        } else {
            " (outside this range)"
        };
        v.push((Swatch::Dot, format!("peak {}{where_}", fmt::bytes(b))));
    }
    let nf = marks
        .failures
        .iter()
        .filter(|&&t| t >= from && t < to)
        .count();
    if !marks.failures.is_empty() {
        v.push((
            Swatch::Triangle,
            format!(
                "failed allocation ({nf} here, {} in run)",
                marks.failures.len()
            ),
        ));
    }
    let na = marks
        .annotations
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .count();
    if na > 0 {
        v.push((Swatch::Tick, format!("annotation ({na})")));
    }
    v
}

/// A one-row legend above the plot, so it never covers data (or the peak).
pub(super) fn draw_legend(
    root: &DrawingArea<SVGBackend, Shift>,
    items: &[(Swatch, String)],
) -> DrawResult<()> {
    let mut x = 96i32;
    let y = 16i32;
    let font = ("sans-serif", 13).into_font().color(&RGBColor(30, 30, 30));
    for (sw, text) in items {
        match sw {
            Swatch::Band(c) => root
                .draw(&Rectangle::new([(x, y - 5), (x + 16, y + 5)], c.filled()))
                .map_err(err)?,
            Swatch::Triangle => root
                .draw(&TriangleMarker::new((x + 8, y), 6, FAIL.filled()))
                .map_err(err)?,
            Swatch::Dot => root
                .draw(&Circle::new((x + 8, y), 5, PEAK.filled()))
                .map_err(err)?,
            Swatch::Tick => root
                .draw(&PathElement::new(
                    vec![(x + 8, y - 7), (x + 8, y + 7)],
                    NOTE.stroke_width(2),
                ))
                .map_err(err)?,
        }
        root.draw(&Text::new(
            text.clone(),
            (x + 22, y),
            font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
        x += 22 + 7 * text.chars().count() as i32 + 24;
    }
    Ok(())
}

/// One API span: lane index, start and end (ns since run start), name.
pub struct Span {
    pub lane: usize,
    pub start: u64,
    pub end: u64,
}

/// Draws one lane per thread with its API spans over `[from, to)` ns.
pub fn lanes(
    width: u32,
    from: u64,
    to: u64,
    lane_names: &[String],
    spans: &[Span],
) -> DrawResult<Rendered> {
    let n = lane_names.len().max(1);
    let height = (40 + 26 * n as u32).min(2000);
    let mut svg = String::new();
    let (l, r);
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (x0, x1) = (from as f64, to.max(from + 1) as f64);
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .margin_right(24)
            .x_label_area_size(26)
            .y_label_area_size(84)
            .build_cartesian_2d(x0..x1, 0f64..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_labels(8)
            .y_labels(0)
            .x_label_formatter(&|x| fmt::axis_time(*x))
            .light_line_style(RGBColor(240, 240, 240))
            .label_style(("sans-serif", 12).into_font().color(&RGBColor(40, 40, 40)))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                spans
                    .iter()
                    .filter(|s| s.end >= from && s.start < to)
                    .map(|s| {
                        let y = s.lane as f64;
                        let c = PALETTE[s.lane % PALETTE.len()];
                        Rectangle::new(
                            [
                                ((s.start as f64).max(x0), y + 0.15),
                                ((s.end as f64).min(x1).max(s.start as f64), y + 0.85),
                            ],
                            c.filled(),
                        )
                    }),
            )
            .map_err(err)?;
        // Lane names, drawn in pixel space left of the plot (the axis is numeric).
        let label_font = ("sans-serif", 12).into_font().color(&RGBColor(40, 40, 40));
        for (i, name) in lane_names.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(x0, i as f64 + 0.5));
            root.draw(&Text::new(
                short(name, 12),
                (px - 6, py),
                label_font.clone().pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(err)?;
        }
        let (xr, _) = chart.plotting_area().get_pixel_range();
        (l, r) = (xr.start, xr.end);
        root.present().map_err(err)?;
    }
    Ok(Rendered {
        svg,
        plot_left: l,
        plot_right: r,
    })
}

pub(super) fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_survives_and_is_marked() {
        let pts: Vec<Point> = (0..100)
            .map(|i| Point {
                t_ns: i * 10,
                min: 0,
                max: if i == 57 { 1 << 30 } else { 1 << 20 },
                last: 1 << 20,
            })
            .collect();
        let s = [Series {
            label: "device 0".into(),
            points: &pts,
            bucket_ns: 10,
            color: PALETTE[0],
        }];
        let marks = Marks {
            peak: Some((575, 1 << 30)),
            failures: vec![900],
            annotations: vec![(100, "step 1".into())],
        };
        let r = timeline((900, 300), 0, 1000, &s, &marks).unwrap();
        assert!(r.svg.starts_with("<svg"));
        assert!(r.svg.contains("peak 1.00 GiB"));
        assert!(r.svg.contains("failed allocation (1 here, 1 in run)"));
        assert!(r.plot_left > 0 && r.plot_right > r.plot_left && r.plot_right < 900);
    }
}
