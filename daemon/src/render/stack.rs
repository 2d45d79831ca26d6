//! The stacked-area chart of the framework view: live buffer bytes stacked by the
//! executable that produced them (the last value of each bucket, bottom layer first),
//! with the total's min/max band drawn over it so no peak hides in the stacking, and
//! failure marks. Drawing only.

use plotters::prelude::*;

use super::chart::{draw_legend, err, time_bytes_chart, DrawResult, Rendered, Swatch, FAIL};
use super::Point;

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
/// (ns since run start).
pub fn stacked(
    size: (u32, u32),
    buckets: &Buckets,
    layers: &[Layer],
    total: Option<&[Point]>,
    failures: &[u64],
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
        let n = starts.len();
        let mut cum = vec![vec![0i64; n]; layers.len() + 1];
        for (k, layer) in layers.iter().enumerate() {
            let (below, above) = cum.split_at_mut(k + 1);
            for (i, c) in above[0].iter_mut().enumerate() {
                *c = below[k][i] + layer.values.get(i).copied().unwrap_or(0).max(0);
            }
        }
        let top_stack = cum
            .last()
            .and_then(|c| c.iter().max().copied())
            .unwrap_or(0);
        let top_total = total.map_or(0, |t| t.iter().map(|p| p.max).max().unwrap_or(0));
        let ytop = (top_stack.max(top_total).max(1) as f64) * 1.1;
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
                Swatch::Band(RGBColor(20, 20, 20)),
                "all live buffers (min–max)".into(),
            ));
        }
        if !failures.is_empty() {
            legend.push((Swatch::Triangle, "failed request".into()));
        }
        draw_legend(&root, &legend)?;
        let mut chart = time_bytes_chart(&root, x0..x1, ytop)?;
        let bw = bucket_ns.max(1) as f64;
        // Each layer is the area between the stack below it and its own top.
        for k in 0..layers.len() {
            let mut upper = Vec::with_capacity(2 * n);
            let mut lower = Vec::with_capacity(2 * n);
            for (i, &s) in starts.iter().enumerate() {
                let a = (s as f64).max(x0);
                let b = (s as f64 + bw).min(x1);
                upper.push((a, cum[k + 1][i] as f64));
                upper.push((b, cum[k + 1][i] as f64));
                lower.push((a, cum[k][i] as f64));
                lower.push((b, cum[k][i] as f64));
            }
            let mut poly = upper;
            poly.extend(lower.into_iter().rev());
            let c = LAYERS[k.min(LAYERS.len() - 1)];
            chart
                .draw_series(std::iter::once(Polygon::new(poly, c.mix(0.75).filled())))
                .map_err(err)?;
        }
        if let Some(t) = total {
            let line: Vec<(f64, f64)> = t
                .iter()
                .flat_map(|p| {
                    let a = (p.t_ns as f64).max(x0);
                    let b = (p.t_ns as f64 + bw).min(x1);
                    [(a, p.max as f64), (b, p.max as f64)]
                })
                .collect();
            chart
                .draw_series(LineSeries::new(line, RGBColor(20, 20, 20).stroke_width(1)))
                .map_err(err)?;
        }
        let fail_y = ytop * 0.94;
        chart
            .draw_series(
                failures
                    .iter()
                    .filter(|&&t| t >= from && t < to)
                    .take(2000)
                    .map(|&t| TriangleMarker::new((t as f64, fail_y), 7, FAIL.filled())),
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
