//! What a chart line costs: series are folded into pixel columns before drawing (the
//! minimum of the minima, the maximum of the maxima and the last value of each column, so
//! no peak hides), and a step line or band is drawn with a vertex only where its value
//! changes. A line then has at most two vertices per column, whatever the bucket count of
//! the stored rollups (up to four per requested point).
//!
//! Pure arithmetic; the charts draw what it returns.

use super::Point;

/// The points of a series over `[from, to)` folded into at most `columns` equal columns.
/// Returns the columns (each `t_ns` its start) and their width. A series whose buckets
/// are already as wide as a column is returned as it is.
pub fn fold(
    points: &[Point],
    bucket_ns: u64,
    from: u64,
    to: u64,
    columns: usize,
) -> (Vec<Point>, u64) {
    let span = to.saturating_sub(from).max(1);
    let w = span.div_ceil(columns.max(1) as u64).max(1);
    if bucket_ns >= w || points.len() <= columns {
        return (points.to_vec(), bucket_ns.max(1));
    }
    let mut out: Vec<Point> = Vec::with_capacity(columns);
    for p in points {
        let c = p.t_ns.max(from).saturating_sub(from) / w;
        let start = from + c * w;
        match out.last_mut() {
            Some(q) if q.t_ns == start => {
                q.min = q.min.min(p.min);
                q.max = q.max.max(p.max);
                q.last = p.last;
            }
            _ => out.push(Point { t_ns: start, ..*p }),
        }
    }
    (out, w)
}

/// The vertices of a step line through `values` (one per column: its start, its value),
/// clipped to `[x0, x1]`; a vertex only where the value changes. Each column's value holds
/// until the next column starts (or, for the last one, for `width`).
pub fn step_line(cols: &[(u64, i64)], width: u64, x0: f64, x1: f64) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = Vec::new();
    let Some(&(t_first, first)) = cols.first() else {
        return v;
    };
    v.push(((t_first as f64).max(x0), first as f64));
    let mut prev = first;
    for &(t, y) in &cols[1..] {
        if y != prev {
            let x = (t as f64).clamp(x0, x1);
            v.push((x, prev as f64));
            v.push((x, y as f64));
            prev = y;
        }
    }
    let end = cols.last().map_or(t_first, |c| c.0).saturating_add(width);
    v.push(((end as f64).min(x1), prev as f64));
    v
}

/// The polygon between a lower and an upper step line (`lower` and `upper` per column),
/// or `None` when they are equal everywhere (nothing to fill).
pub fn band(cols: &[(u64, i64, i64)], width: u64, x0: f64, x1: f64) -> Option<Vec<(f64, f64)>> {
    if cols.iter().all(|c| c.1 == c.2) {
        return None;
    }
    let hi: Vec<(u64, i64)> = cols.iter().map(|c| (c.0, c.2)).collect();
    let lo: Vec<(u64, i64)> = cols.iter().map(|c| (c.0, c.1)).collect();
    let mut poly = step_line(&hi, width, x0, x1);
    poly.extend(step_line(&lo, width, x0, x1).into_iter().rev());
    Some(poly)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(t: u64, min: i64, max: i64, last: i64) -> Point {
        Point {
            t_ns: t,
            min,
            max,
            last,
        }
    }

    #[test]
    fn folding_keeps_extremes_and_bounds_the_count() {
        // 8,000 buckets of a sawtooth with one spike, folded into 500 columns.
        let pts: Vec<Point> = (0..8000u64)
            .map(|i| {
                let v = if i == 4321 { 1 << 40 } else { (i % 17) as i64 };
                pt(i * 10, v, v, v)
            })
            .collect();
        let (cols, w) = fold(&pts, 10, 0, 80_000, 500);
        assert!(cols.len() <= 500 && w == 160, "{} {w}", cols.len());
        assert_eq!(cols.iter().map(|c| c.max).max(), Some(1 << 40));
        assert_eq!(cols.iter().map(|c| c.min).min(), Some(0));
        assert_eq!(cols.last().map(|c| c.last), Some((7999 % 17) as i64));
    }

    #[test]
    fn step_line_has_vertices_only_at_changes() {
        let cols: Vec<(u64, i64)> = (0..1000u64)
            .map(|i| (i, if i < 600 { 5 } else { 9 }))
            .collect();
        let v = step_line(&cols, 1, 0.0, 1000.0);
        assert_eq!(
            v,
            vec![(0.0, 5.0), (600.0, 5.0), (600.0, 9.0), (1000.0, 9.0)]
        );
        // A value changing at every column: two vertices per column at most.
        let cols: Vec<(u64, i64)> = (0..1000u64).map(|i| (i, i as i64)).collect();
        assert!(step_line(&cols, 1, 0.0, 1000.0).len() <= 2 * 1000 + 2);
    }

    #[test]
    fn flat_band_is_not_drawn() {
        let cols = [(0, 1, 1), (1, 2, 2)];
        assert!(band(&cols, 1, 0.0, 2.0).is_none());
        let cols = [(0, 1, 3), (1, 2, 2)];
        assert_eq!(band(&cols, 1, 0.0, 2.0).map(|p| p.len()), Some(8));
    }
}
