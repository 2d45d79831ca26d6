//! The stacked-area chart of the framework view: live buffer bytes stacked by the
//! executable that produced them (the last value of each bucket, bottom layer first),
//! with the total's min/max band drawn over it so no peak hides in the stacking, and
//! failure marks. Drawing only.

use plotters::prelude::*;

use super::chart::{columns_of, err, time_bytes_chart, DrawResult, Rendered, Tone};
use super::legend::{self, Swatch};
use super::{columns, Point};

/// Colours of the stacked layers (Okabe-Ito and tints), "other" last in grey.
const LAYERS: [RGBColor; 8] = [
    RGBColor(0, 94, 184),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(150, 150, 150),
];

/// The buckets a stacked chart draws: where each starts (ns since the run's start) and
/// their width, over the time range `[from, to)`.
pub struct Buckets<'a> {
    pub from: u64,
    pub to: u64,
    pub starts: &'a [u64],
    pub bucket_ns: u64,
}

/// One stacked layer: its name and one value per bucket.
pub struct Layer {
    pub label: String,
    pub values: Vec<i64>,
}

/// Draws `layers` stacked over the buckets, the `total` line over them, and `failures`
/// (ns since run start) in their tone's colour.
pub fn stacked(
    size: (u32, u32),
    buckets: &Buckets,
    layers: &[Layer],
    total: Option<&[Point]>,
    (failures, tone): (&[u64], Tone),
) -> DrawResult<Rendered> {
    let Buckets {
        from,
        to,
        starts,
        bucket_ns,
    } = *buckets;
    let mut svg = String::new();
    let (l, r);
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // Layers and the total folded into the chart's pixel columns (each layer's last
        // value of a column; the total's min and max), then stacked.
        let cols = columns_of(size);
        let as_points = |values: &[i64]| -> Vec<Point> {
            starts
                .iter()
                .zip(values.iter().chain(std::iter::repeat(&0)))
                .map(|(&t_ns, &v)| Point {
                    t_ns,
                    min: v,
                    max: v,
                    last: v.max(0),
                })
                .collect()
        };
        let mut width = bucket_ns.max(1);
        let folded: Vec<Vec<Point>> = layers
            .iter()
            .map(|layer| {
                let (p, w) = columns::fold(&as_points(&layer.values), bucket_ns, from, to, cols);
                width = w;
                p
            })
            .collect();
        let n = folded.first().map_or(0, Vec::len);
        let col_starts: Vec<u64> = folded
            .first()
            .map_or_else(Vec::new, |f| f.iter().map(|p| p.t_ns).collect());
        let mut cum = vec![vec![0i64; n]; layers.len() + 1];
        for (k, layer) in folded.iter().enumerate() {
            let (below, above) = cum.split_at_mut(k + 1);
            for (i, c) in above[0].iter_mut().enumerate() {
                *c = below[k][i] + layer.get(i).map_or(0, |p| p.last);
            }
        }
        let total = total.map(|t| columns::fold(t, bucket_ns, from, to, cols));
        let top_stack = cum
            .last()
            .and_then(|c| c.iter().max().copied())
            .unwrap_or(0);
        let top_total = total
            .as_ref()
            .map_or(0, |t| t.0.iter().map(|p| p.max).max().unwrap_or(0));
        let ymax = top_stack.max(top_total).max(1) as f64;
        let (x0, x1) = (from as f64, to.max(from + 1) as f64);
        let mut legend: Vec<(Swatch, String)> = layers
            .iter()
            .enumerate()
            .map(|(k, l)| {
                (
                    Swatch::Band(LAYERS[k.min(LAYERS.len() - 1)]),
                    l.label.clone(),
                )
            })
            .collect();
        if total.is_some() {
            legend.push((
                Swatch::Line(RGBColor(20, 20, 20)),
                "all live buffers (highest per column)".into(),
            ));
        }
        if !failures.is_empty() {
            legend.push((Swatch::Triangle(tone.color()), "failed request".into()));
        }
        let legend_h = legend::height(size.0, &legend);
        legend::draw(&root, &legend)?;
        let (mut chart, ytop) = time_bytes_chart(&root, x0..x1, ymax, legend_h)?;
        // Each layer is the area between the stack below it and its own top.
        for k in 0..layers.len() {
            let upper: Vec<(u64, i64)> = col_starts
                .iter()
                .copied()
                .zip(cum[k + 1].iter().copied())
                .collect();
            let lower: Vec<(u64, i64)> = col_starts
                .iter()
                .copied()
                .zip(cum[k].iter().copied())
                .collect();
            if upper == lower {
                continue;
            }
            let mut poly = columns::step_line(&upper, width, x0, x1);
            poly.extend(columns::step_line(&lower, width, x0, x1).into_iter().rev());
            let c = LAYERS[k.min(LAYERS.len() - 1)];
            chart
                .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.75).filled())))
                .map_err(err)?;
        }
        if let Some((t, w)) = &total {
            let hi: Vec<(u64, i64)> = t.iter().map(|p| (p.t_ns, p.max)).collect();
            chart
                .draw_series(LineSeries::new(
                    columns::step_line(&hi, *w, x0, x1),
                    RGBColor(20, 20, 20).stroke_width(1),
                ))
                .map_err(err)?;
        }
        let fail_y = ytop * 0.94;
        chart
            .draw_series(
                failures
                    .iter()
                    .filter(|&&t| t >= from && t < to)
                    .take(2000)
                    .map(|&t| TriangleMarker::new((t as f64, fail_y), 7, tone.color().filled())),
            )
            .map_err(err)?;
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
