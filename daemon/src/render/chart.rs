//! SVG charts drawn with plotters: the live-bytes timeline (min/max band per bucket so no
//! peak is hidden, peak / failure / annotation markers) and the API-span lanes.
//!
//! Owns drawing only; the data (timelines, spans) comes from the `runs` feature. Returns
//! the SVG text plus the plot area's pixel range, which the page's drag-to-zoom script
//! needs to map pixels back to time.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::legend::{self, Swatch};
use super::{axis, columns, fmt, Point};

/// Colour-blind-safe palette (Okabe-Ito), dark enough for text contrast on white.
pub const PALETTE: [RGBColor; 4] = [
    RGBColor(0, 94, 184),
    RGBColor(200, 82, 0),
    RGBColor(0, 122, 80),
    RGBColor(150, 60, 150),
];
pub(super) const FAIL: RGBColor = RGBColor(200, 0, 30);
/// Refused requests of a run that did not end out of memory.
pub(super) const REFUSED: RGBColor = RGBColor(214, 120, 0);
pub(super) const PEAK: RGBColor = RGBColor(170, 0, 40);
pub(super) const NOTE: RGBColor = RGBColor(90, 90, 90);
/// The device's capacity line.
const CAPACITY: RGBColor = RGBColor(110, 110, 110);

/// How a timeline series is drawn.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// A solid line at each bucket's maximum over the min–max band of the bucket.
    #[default]
    Band,
    /// A dashed line (a limit), drawn over the others so a line it equals shows through.
    Dashed,
}

/// One line of a timeline chart.
pub struct Series<'a> {
    pub label: String,
    pub points: &'a [Point],
    pub bucket_ns: u64,
    pub color: RGBColor,
    pub style: Style,
}

impl<'a> Series<'a> {
    /// A solid line with its min–max band.
    pub fn band(
        label: impl Into<String>,
        points: &'a [Point],
        bucket_ns: u64,
        color: RGBColor,
    ) -> Self {
        Series {
            label: label.into(),
            points,
            bucket_ns,
            color,
            style: Style::Band,
        }
    }
}

/// How a run's failed requests read: red only when the run ended out of memory, orange
/// for refusals it went on after (the rule is `runs::outcome`'s; charts only draw it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tone {
    #[default]
    Failure,
    Warning,
}

impl Tone {
    /// The CSS class of the dashboard's badges and verdict sections.
    pub fn class(self) -> &'static str {
        match self {
            Tone::Failure => "failure",
            Tone::Warning => "warning",
        }
    }

    /// The colour of failure marks.
    pub(super) fn color(self) -> RGBColor {
        match self {
            Tone::Failure => FAIL,
            Tone::Warning => REFUSED,
        }
    }
}

/// Markers drawn over the timeline (times relative to the run's start).
#[derive(Default)]
pub struct Marks {
    pub peak: Option<(u64, i64)>,
    pub failures: Vec<u64>,
    /// The colour of the failure marks.
    pub failure_tone: Tone,
    /// How many failures the range and the run hold, when `failures` draws fewer (one
    /// per column); else the legend counts `failures`.
    pub failure_counts: Option<(u64, u64)>,
    pub annotations: Vec<(u64, String)>,
    /// The device's memory (label, bytes): a line when it is within a few times the data
    /// (else the legend says it is above the chart).
    pub capacity: Option<(String, i64)>,
}

/// A capacity more than this many times the data's maximum is named, not drawn (the
/// data would be a flat line at the bottom).
const CAPACITY_SCALE: i64 = 4;

/// A rendered chart.
pub struct Rendered {
    pub svg: String,
    /// Pixel x of the plot area's left and right edge.
    pub plot_left: i32,
    pub plot_right: i32,
}

pub(super) type DrawResult<T> = Result<T, String>;

pub(super) type TimeBytes<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The plot area of a bytes-over-time chart below a legend `legend_h` pixels high: time
/// since the run's start across, bytes up to a round binary value at or above `ymax`
/// (`render::axis`), with the dashboard's margins, grid and labels. Returns the chart and
/// its top in bytes.
pub(super) fn time_bytes_chart<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    x: std::ops::Range<f64>,
    ymax: f64,
    legend_h: u32,
) -> DrawResult<(TimeBytes<'a, 'b>, f64)> {
    let (step, top) = axis::byte_ticks(ymax * 1.04, 6);
    let ytop = top as f64;
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .margin_top(legend_h.max(20) + 6)
        .margin_right(24)
        .x_label_area_size(34)
        .y_label_area_size(84)
        .build_cartesian_2d(x.clone(), 0f64..ytop)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_labels(8)
        .x_label_formatter(&|x| fmt::axis_time(*x))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .axis_style(RGBColor(80, 80, 80))
        .label_style(("sans-serif", 13).into_font().color(&RGBColor(40, 40, 40)))
        .x_desc("time since run start")
        .axis_desc_style(("sans-serif", 13).into_font().color(&RGBColor(40, 40, 40)))
        .draw()
        .map_err(err)?;
    let font = ("sans-serif", 13).into_font().color(&RGBColor(40, 40, 40));
    for v in axis::tick_values(step, top) {
        let y = v as f64;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x.start, y), (x.end, y)],
                RGBColor(222, 222, 222).stroke_width(1),
            )))
            .map_err(err)?;
        let (px, py) = chart.backend_coord(&(x.start, y));
        root.draw(&PathElement::new(
            vec![(px - 5, py), (px, py)],
            RGBColor(80, 80, 80).stroke_width(1),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            axis::tick_label(v),
            (px - 8, py),
            font.clone().pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(err)?;
    }
    Ok((chart, ytop))
}

pub(super) fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("chart drawing failed: {e:?}")
}

/// Columns a series is folded into: two plot pixels each, so a step line has at most
/// one vertex per pixel and a band two.
pub(super) fn columns_of(size: (u32, u32)) -> usize {
    (size.0.saturating_sub(120) / 2).max(50) as usize
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
        (l, r) = draw_timeline(&root, size, from, to, series, marks)?;
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
    size: (u32, u32),
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
    let capacity = marks
        .capacity
        .as_ref()
        .filter(|(_, c)| *c > 0)
        .map(|(label, c)| (label, *c, *c <= ymax.max(1).saturating_mul(CAPACITY_SCALE)));
    if let Some((_, c, true)) = capacity {
        ymax = ymax.max(c);
    }
    let (x0, x1) = (from as f64, to.max(from + 1) as f64);
    let legend = legend_items(
        series,
        marks,
        from,
        to,
        capacity.map(|c| (c.0.as_str(), c.1, c.2)),
    );
    let legend_h = legend::height(size.0, &legend);
    legend::draw(root, &legend)?;
    let (mut chart, ytop) = time_bytes_chart(root, x0..x1, ymax.max(1) as f64, legend_h)?;

    let visible: Vec<&(u64, String)> = marks
        .annotations
        .iter()
        .filter(|(t, _)| *t >= from && *t < to)
        .collect();
    let few = visible.len() <= 12;
    let (plot_x, _) = chart.plotting_area().get_pixel_range();
    let mut label_free_from = i32::MIN;
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
        let text = short(text, 24);
        let (px, _) = chart.backend_coord(&(x, ytop));
        let w = (7.0 * text.chars().count() as f64) as i32;
        // A label only where it does not run into the previous one or off the plot.
        if few && px >= label_free_from && px + w <= plot_x.end {
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x, ytop * 0.99),
                    ("sans-serif", 11).into_font().color(&NOTE),
                )))
                .map_err(err)?;
            label_free_from = px + w + 6;
        }
    }

    if let Some((_, c, true)) = capacity {
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x0, c as f64), (x1, c as f64)],
                CAPACITY.stroke_width(2),
            )))
            .map_err(err)?;
    }
    let cols = columns_of(size);
    for s in series.iter().filter(|s| s.style == Style::Band) {
        let (pts, w) = columns::fold(s.points, s.bucket_ns, from, to, cols);
        let tri: Vec<(u64, i64, i64)> = pts.iter().map(|p| (p.t_ns, p.min, p.max)).collect();
        if let Some(poly) = columns::band(&tri, w, x0, x1) {
            chart
                .draw_series(std::iter::once(Polygon::new(
                    poly,
                    s.color.mix(0.22).filled(),
                )))
                .map_err(err)?;
        }
        let upper: Vec<(u64, i64)> = pts.iter().map(|p| (p.t_ns, p.max)).collect();
        chart
            .draw_series(LineSeries::new(
                columns::step_line(&upper, w, x0, x1),
                s.color.stroke_width(2),
            ))
            .map_err(err)?;
    }
    for s in series.iter().filter(|s| s.style == Style::Dashed) {
        let (pts, w) = columns::fold(s.points, s.bucket_ns, from, to, cols);
        let upper: Vec<(u64, i64)> = pts.iter().map(|p| (p.t_ns, p.max)).collect();
        chart
            .draw_series(DashedLineSeries::new(
                columns::step_line(&upper, w, x0, x1),
                7,
                5,
                s.color.stroke_width(3),
            ))
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
        let fail = marks.failure_tone.color();
        // A few failures are drawn down to the axis; many would hide the chart behind a
        // wall of lines, so each is then a short tick under its triangle.
        let line_from = if fails.len() <= FULL_HEIGHT_FAILURE_LINES {
            0.0
        } else {
            ytop * 0.86
        };
        chart
            .draw_series(fails.iter().map(|&(x, y)| {
                PathElement::new(vec![(x, line_from), (x, y)], fail.mix(0.6).stroke_width(1))
            }))
            .map_err(err)?;
        chart
            .draw_series(
                fails
                    .iter()
                    .map(|&c| TriangleMarker::new(c, 7, fail.filled())),
            )
            .map_err(err)?;
    }

    if let Some((t, b)) = marks.peak {
        if t >= from && t < to {
            let c = (t as f64, b as f64);
            chart
                .draw_series(std::iter::once(Circle::new(c, 6, PEAK.filled())))
                .map_err(err)?;
            let label = format!("peak {}", fmt::bytes(b));
            let (xr, _) = chart.plotting_area().get_pixel_range();
            let (p0, p1) = (f64::from(xr.start), f64::from(xr.end));
            let px = |t: f64| p0 + (t - x0) / (x1 - x0) * (p1 - p0);
            let fail_px: Vec<f64> = fails.iter().map(|&(t, _)| px(t)).collect();
            let left = peak_label_left(px(c.0), label_width(&label), &fail_px, (p0, p1));
            let anchor = if left { HPos::Right } else { HPos::Left };
            let dx = if left {
                -(x1 - x0) * 0.01
            } else {
                (x1 - x0) * 0.01
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
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

/// About how wide the peak's label is drawn (13 px sans-serif), in pixels.
fn label_width(label: &str) -> f64 {
    label.chars().count() as f64 * 7.5 + 8.0
}

/// Whether the peak's label (`w` px wide) goes left of its dot at `x` px: on the right,
/// unless the dot is in the right 30 % of the plot [p0, p1]; on the other side when a
/// failure mark's line (at `fails`, px) would cross the label and would not cross it
/// there, and it fits there.
fn peak_label_left(x: f64, w: f64, fails: &[f64], (p0, p1): (f64, f64)) -> bool {
    let default_left = x > p0 + (p1 - p0) * 0.7;
    let span = |left: bool| {
        if left {
            (x - w, x - 4.0)
        } else {
            (x + 4.0, x + w)
        }
    };
    let crossed = |left: bool| {
        let (a, b) = span(left);
        fails.iter().any(|&f| f >= a - 4.0 && f <= b + 4.0)
    };
    let fits = |left: bool| {
        let (a, b) = span(left);
        a >= p0 && b <= p1
    };
    if crossed(default_left) && !crossed(!default_left) && fits(!default_left) {
        !default_left
    } else {
        default_left
    }
}

fn legend_items(
    series: &[Series],
    marks: &Marks,
    from: u64,
    to: u64,
    capacity: Option<(&str, i64, bool)>,
) -> Vec<(Swatch, String)> {
    let mut v: Vec<(Swatch, String)> = series
        .iter()
        .map(|s| match s.style {
            Style::Band => (Swatch::Band(s.color), s.label.clone()),
            Style::Dashed => (Swatch::Dashed(s.color), s.label.clone()),
        })
        .collect();
    if let Some((label, c, drawn)) = capacity {
        let text = if drawn {
            format!("{label} {}", fmt::bytes(c))
        } else {
            format!("{label} {} (above this chart)", fmt::bytes(c))
        };
        v.push((Swatch::Line(CAPACITY), text));
    }
    if let Some((t, b)) = marks.peak {
        let where_ = if t >= from && t < to {
            ""
        } else {
            " (outside this range)"
        };
        v.push((Swatch::Dot, format!("peak {}{where_}", fmt::bytes(b))));
    }
    let (nf, total) = marks.failure_counts.unwrap_or_else(|| {
        let here = marks
            .failures
            .iter()
            .filter(|&&t| t >= from && t < to)
            .count();
        (here as u64, marks.failures.len() as u64)
    });
    if total > 0 {
        v.push((
            Swatch::Triangle(marks.failure_tone.color()),
            format!("failed allocation ({nf} here, {total} in run)"),
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

/// One API span: lane index, start and end (ns since run start), name.
pub struct Span {
    pub lane: usize,
    pub start: u64,
    pub end: u64,
}

/// Spans of one lane closer than `gap` ns merged into one bar (a bar narrower than a
/// pixel column is drawn as one anyway), so a lane has at most one bar per column.
fn merge_spans(spans: &[Span], from: u64, to: u64, gap: u64) -> Vec<Span> {
    let mut v: Vec<&Span> = spans
        .iter()
        .filter(|s| s.end >= from && s.start < to)
        .collect();
    v.sort_by_key(|s| (s.lane, s.start));
    let mut out: Vec<Span> = Vec::new();
    for s in v {
        match out.last_mut() {
            Some(p) if p.lane == s.lane && s.start <= p.end.saturating_add(gap) => {
                p.end = p.end.max(s.end);
            }
            _ => out.push(Span {
                lane: s.lane,
                start: s.start,
                end: s.end.max(s.start),
            }),
        }
    }
    out
}

/// Draws one lane per thread with its API spans over `[from, to)` ns, under a legend
/// naming each lane's colour.
pub fn lanes(
    width: u32,
    from: u64,
    to: u64,
    lane_names: &[String],
    spans: &[Span],
) -> DrawResult<Rendered> {
    let n = lane_names.len().max(1);
    let legend: Vec<(Swatch, String)> = lane_names
        .iter()
        .enumerate()
        .take(16)
        .map(|(i, name)| (Swatch::Band(PALETTE[i % PALETTE.len()]), name.clone()))
        .collect();
    let legend_h = legend::height(width, &legend);
    let height = (legend_h + 34 + 26 * n as u32).min(2000);
    let mut svg = String::new();
    let (l, r);
    {
        let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        legend::draw(&root, &legend)?;
        let (x0, x1) = (from as f64, to.max(from + 1) as f64);
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .margin_top(legend_h)
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
        let gap = (to.saturating_sub(from) / columns_of((width, 0)) as u64).max(1);
        chart
            .draw_series(merge_spans(spans, from, to, gap).into_iter().map(|s| {
                let y = s.lane as f64;
                let c = PALETTE[s.lane % PALETTE.len()];
                Rectangle::new(
                    [
                        ((s.start as f64).max(x0), y + 0.15),
                        ((s.end as f64).min(x1).max(s.start as f64), y + 0.85),
                    ],
                    c.filled(),
                )
            }))
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

/// Up to this many failures in the range, each is drawn as a line down to the axis.
const FULL_HEIGHT_FAILURE_LINES: usize = 12;

#[cfg(test)]
mod tests {
    use super::*;

    /// The vertical failure lines of an SVG chart: (x, top y, bottom y) of each two-point
    /// polyline in the failure colour whose points share their x.
    fn vertical_lines(svg: &str) -> Vec<(f64, f64, f64)> {
        let c = Tone::Failure.color();
        let stroke = format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        svg.split("<polyline")
            .skip(1)
            .filter(|p| p.split("/>").next().is_some_and(|e| e.contains(&stroke)))
            .filter_map(|p| {
                let pts = p.split("points=\"").nth(1)?.split('"').next()?;
                let xy: Vec<(f64, f64)> = pts
                    .split_whitespace()
                    .filter_map(|v| {
                        let (x, y) = v.split_once(',')?;
                        Some((x.parse().ok()?, y.parse().ok()?))
                    })
                    .collect();
                match xy[..] {
                    [(x0, y0), (x1, y1)] if x0 == x1 => Some((x0, y0.min(y1), y0.max(y1))),
                    _ => None,
                }
            })
            .collect()
    }

    /// Many failures do not hide the chart: past a dozen, each is a short tick.
    #[test]
    fn many_failures_are_ticks_not_a_wall() {
        let pts: Vec<Point> = (0..100)
            .map(|i| Point {
                t_ns: i * 10,
                min: 0,
                max: 1 << 30,
                last: 1 << 30,
            })
            .collect();
        let s = [Series::band("device 0", &pts, 10, PALETTE[0])];
        let tall = |failures: Vec<u64>| {
            let marks = Marks {
                failures,
                failure_tone: Tone::Failure,
                ..Marks::default()
            };
            let r = timeline((900, 300), 0, 1000, &s, &marks).unwrap();
            vertical_lines(&r.svg)
                .into_iter()
                .filter(|(_, top, bottom)| bottom - top > 100.0)
                .count()
        };
        assert_eq!(tall(vec![100, 500, 900]), 3);
        assert_eq!(tall((0..100).map(|i| i * 10 + 5).collect()), 0);
    }

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
        let s = [Series::band("device 0", &pts, 10, PALETTE[0])];
        let marks = Marks {
            peak: Some((575, 1 << 30)),
            failures: vec![900],
            failure_tone: Tone::Failure,
            failure_counts: None,
            annotations: vec![(100, "step 1".into())],
            capacity: Some(("GPU capacity".into(), 3 << 30)),
        };
        let r = timeline((900, 300), 0, 1000, &s, &marks).unwrap();
        assert!(r.svg.starts_with("<svg"));
        assert!(r.svg.contains("peak 1.00 GiB"));
        assert!(r.svg.contains("failed allocation (1 here, 1 in run)"));
        // Marks drawn one per column say how many they stand for.
        let counted = Marks {
            failure_counts: Some((40_000, 816_705)),
            ..marks
        };
        let r2 = timeline((900, 300), 0, 1000, &s, &counted).unwrap();
        assert!(r2
            .svg
            .contains("failed allocation (40000 here, 816705 in run)"));
        assert!(r.plot_left > 0 && r.plot_right > r.plot_left && r.plot_right < 900);
        assert!(r.svg.contains("GPU capacity 3.00 GiB") && !r.svg.contains("above this chart"));
        assert!(r.svg.contains("\n3 GiB\n") && !r.svg.contains("MiB\n"));
    }

    #[test]
    fn the_peak_label_keeps_clear_of_failure_marks() {
        let plot = (60.0, 1160.0);
        // Left part of the plot: on the right of the dot, unless a failure's line
        // crosses it there (the no-donation run: peak at 4.41 s, its OOM at 4.84 s).
        assert!(!peak_label_left(380.0, 110.0, &[], plot));
        assert!(peak_label_left(380.0, 110.0, &[420.0], plot));
        // Failures on both sides, or no room on the other: it stays.
        assert!(!peak_label_left(380.0, 110.0, &[420.0, 300.0], plot));
        assert!(!peak_label_left(100.0, 110.0, &[150.0], plot));
        // The right 30 %: on the left, unless a failure crosses it there.
        assert!(peak_label_left(1100.0, 110.0, &[1160.0], plot));
        assert!(!peak_label_left(1000.0, 110.0, &[950.0], plot));
        // A failure at the dot itself crosses neither side.
        assert!(!peak_label_left(380.0, 110.0, &[380.0], plot));
        // Drawn: the label is anchored at its end (left of the dot) in a chart where a
        // failure follows the peak closely.
        let pts: Vec<Point> = (0..1500u64)
            .map(|i| Point {
                t_ns: i,
                min: 0,
                max: if i >= 441 { 10 << 30 } else { 0 },
                last: if i >= 441 { 10 << 30 } else { 0 },
            })
            .collect();
        let s = [Series::band("GPU 0", &pts, 1, PALETTE[0])];
        let marks = |failures: Vec<u64>| Marks {
            peak: Some((441, 10 << 30)),
            failures,
            failure_tone: Tone::Failure,
            ..Marks::default()
        };
        let anchor_of_peak = |svg: &str| {
            // The legend names the peak first; the label on the plot is the last text.
            let at = svg.rfind(">\npeak 10.00 GiB\n<").expect("a peak label");
            let open = svg[..at].rfind("<text").unwrap();
            svg[open..at].contains("text-anchor=\"end\"")
        };
        let near = timeline((1400, 320), 0, 1500, &s, &marks(vec![484])).unwrap();
        assert!(anchor_of_peak(&near.svg), "the label crosses the failure");
        let alone = timeline((1400, 320), 0, 1500, &s, &marks(vec![])).unwrap();
        assert!(!anchor_of_peak(&alone.svg));
    }

    #[test]
    fn lines_have_at_most_two_vertices_per_pixel() {
        // 8,000 buckets changing every bucket, on a 1200 px chart.
        let pts: Vec<Point> = (0..8000u64)
            .map(|i| {
                let v = (((i * 7919) % 1000) as i64) << 20;
                Point {
                    t_ns: i * 10,
                    min: v / 2,
                    max: v,
                    last: v,
                }
            })
            .collect();
        let s = [Series::band("GPU 0", &pts, 10, PALETTE[0])];
        let r = timeline((1200, 320), 0, 80_000, &s, &Marks::default()).unwrap();
        let width = (r.plot_right - r.plot_left) as usize;
        for list in r.svg.split("points=\"").skip(1) {
            let n = list
                .split('"')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .count();
            assert!(n <= 2 * width + 8, "{n} vertices for {width} px");
        }
        assert!(r.svg.len() < 120_000, "{} bytes", r.svg.len());
    }
}
