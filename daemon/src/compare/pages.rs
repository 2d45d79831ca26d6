//! The Compare page: two runs' live-bytes timelines on one chart (aligned at their start
//! or at a marker), their peaks, and what was live at each peak side by side by memory
//! kind, size class and annotation.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::views::{Choice, ComparePage, CompareRow};
use crate::app::error::AppError;
use crate::app::extract::Query;
use crate::app::page::html;
use crate::app::state::AppState;
use crate::peak::{size_class_label, Group, Peak};
use crate::render::chart::{self, Marks, Series, PALETTE};
use crate::render::{fmt, Point};
use crate::runs::{run_end, run_lite, CHART_H, CHART_W};

#[derive(Deserialize)]
pub(super) struct CompareQ {
    a: Option<i64>,
    b: Option<i64>,
    da: Option<i64>,
    db: Option<i64>,
    /// `start` (default) or `marker:NAME`: align both timelines at that annotation.
    align: Option<String>,
}

pub(super) async fn compare(
    State(st): State<AppState>,
    Query(q): Query<CompareQ>,
) -> Result<Response, AppError> {
    let runs = st.store.runs(500).await?;
    let a = q.a.or(runs.get(1).map(|r| r.id));
    let b = q.b.or(runs.first().map(|r| r.id));
    let heads: Vec<(i64, String, String, i64, i64)> = runs
        .iter()
        .map(|r| {
            (
                r.id,
                r.run_key.clone(),
                r.node.clone(),
                r.wall_anchor_unix_ns,
                r.created_unix_ns,
            )
        })
        .collect();
    let titles = st.store.identities(&heads).await?;
    let mut choices: Vec<Choice> = Vec::with_capacity(runs.len());
    for r in &runs {
        let node = crate::snapshot::machine_of(&st.store, r.id, &r.node).await?;
        choices.push(Choice {
            id: r.id,
            label: format!(
                "#{} {} ({node})",
                r.id,
                titles
                    .get(&r.id)
                    .map_or(r.run_key.as_str(), |i| i.title.as_str()),
            ),
            sel_a: Some(r.id) == a,
            sel_b: Some(r.id) == b,
        });
    }
    let (da, db) = (q.da.unwrap_or(0), q.db.unwrap_or(0));
    let mut page = ComparePage {
        choices,
        da,
        db,
        message: String::new(),
        svg: String::new(),
        a_label: String::new(),
        b_label: String::new(),
        a_peak: String::new(),
        b_peak: String::new(),
        peak_delta: String::new(),
        rows: Vec::new(),
        fw_svg: String::new(),
        fw_rows: Vec::new(),
        snap: None,
        align: q.align.clone().unwrap_or_else(|| "start".into()),
        align_label: "at their start".into(),
    };
    let marker = match q.align.as_deref() {
        None | Some("") | Some("start") => None,
        Some(m) => match m.strip_prefix("marker:") {
            Some(name) if !name.is_empty() => Some(name.to_string()),
            _ => {
                return Err(AppError::bad(format!(
                    "align={m:?}: use align=start or align=marker:NAME (an annotation's exact text)"
                )))
            }
        },
    };
    let (Some(a), Some(b)) = (a, b) else {
        return html(&page);
    };
    let (Some(ra), Some(rb)) = (run_lite(&st.store, a).await?, run_lite(&st.store, b).await?)
    else {
        page.message = format!("Run #{a} or #{b} does not exist.");
        let mut res = html(&page)?;
        *res.status_mut() = axum::http::StatusCode::NOT_FOUND;
        return Ok(res);
    };
    // Alignment: shift each run so that its marker (or its start) lands at `at`.
    let (ma, mb) = match &marker {
        None => (0, 0),
        Some(name) => {
            let fa = st.store.first_marker(a, name).await?;
            let fb = st.store.first_marker(b, name).await?;
            match (fa, fb) {
                (Some(x), Some(y)) => {
                    page.align_label = format!("at their first marker \"{name}\"");
                    (x, y)
                }
                _ => {
                    page.message = format!(
                        "Marker \"{name}\" is not in {}; the timelines are aligned at their start instead. Markers are annotations (memwatch-jax's markers or NVTX/roctx ranges); see each run's page for its annotations.",
                        match (fa, fb) {
                            (None, None) => "either run".to_string(),
                            (None, _) => format!("run #{a}"),
                            _ => format!("run #{b}"),
                        }
                    );
                    (0, 0)
                }
            }
        }
    };
    let at = ma.max(mb);
    let (sa, sb) = (at - ma, at - mb);
    let (ea, eb) = (run_end(&ra), run_end(&rb));
    let end = (ea + sa).max(eb + sb);
    let pts = (CHART_W - 100) as usize;
    // Each run's own span only (nothing drawn after a run ended), same bucket width.
    let share = |e: u64| ((pts as u64 * e).div_ceil(end) as usize).max(1);
    let ta = st
        .store
        .timeline(a, da, Some(0), Some(ea), share(ea))
        .await?;
    let tb = st
        .store
        .timeline(b, db, Some(0), Some(eb), share(eb))
        .await?;
    let (Some(ta), Some(tb)) = (ta, tb) else {
        page.message = "A run disappeared while comparing.".into();
        return html(&page);
    };
    let shift = |p: &[Point], by: u64| -> Vec<Point> {
        p.iter()
            .map(|x| Point {
                t_ns: x.t_ns + by,
                ..*x
            })
            .collect()
    };
    let (pa_pts, pb_pts) = (shift(&ta.points, sa), shift(&tb.points, sb));
    let idents = st
        .store
        .identities(&[
            (
                a,
                ra.run_key.clone(),
                ra.node.clone(),
                ra.wall_anchor_unix_ns,
                ra.created_unix_ns,
            ),
            (
                b,
                rb.run_key.clone(),
                rb.node.clone(),
                rb.wall_anchor_unix_ns,
                rb.created_unix_ns,
            ),
        ])
        .await?;
    let title = |id: i64, key: &str| {
        idents
            .get(&id)
            .map_or_else(|| key.to_string(), |i| i.title.clone())
    };
    page.a_label = format!("#{} {} GPU {da}", a, title(a, &ra.run_key));
    page.b_label = format!("#{} {} GPU {db}", b, title(b, &rb.run_key));
    let series = [
        Series {
            label: format!("A: {}", page.a_label),
            points: &pa_pts,
            bucket_ns: ta.bucket_ns,
            color: PALETTE[0],
            style: chart::Style::Band,
        },
        Series {
            label: format!("B: {}", page.b_label),
            points: &pb_pts,
            bucket_ns: tb.bucket_ns,
            color: PALETTE[1],
            style: chart::Style::Band,
        },
    ];
    let marks = Marks {
        annotations: match &marker {
            Some(m) if page.message.is_empty() => vec![(at, m.clone())],
            _ => Vec::new(),
        },
        ..Marks::default()
    };
    page.svg = chart::timeline((CHART_W, CHART_H), 0, end, &series, &marks)
        .map_err(AppError::internal)?
        .svg;
    framework(&st, &mut page, (a, da, ea, sa), (b, db, eb, sb), end).await?;
    page.snap = crate::snapshot::compare_dumps(&st, (a, da), (b, db)).await?;
    let pa = st.store.live_at(a, da, None, 0).await?;
    let pb = st.store.live_at(b, db, None, 0).await?;
    let peak_of = |p: &Option<Peak>| p.as_ref().map_or(0, |p| p.peak_bytes);
    page.a_peak = fmt::bytes(peak_of(&pa));
    page.b_peak = fmt::bytes(peak_of(&pb));
    page.peak_delta = fmt::delta_bytes(peak_of(&pb) - peak_of(&pa));
    type Pick = fn(&Peak) -> &Vec<Group>;
    let dims: [(&str, Pick, bool); 3] = [
        ("memory kind", |p| &p.by_kind, false),
        ("size class", |p| &p.by_size_class, true),
        ("annotation", |p| &p.by_annotation, false),
    ];
    for (title, pick, sized) in dims {
        page.rows.push(CompareRow {
            header: true,
            key: title.into(),
            a: String::new(),
            b: String::new(),
            delta: String::new(),
            cls: "",
        });
        let mut m: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        if let Some(p) = &pa {
            for g in pick(p) {
                m.entry(g.key.clone()).or_default().0 += g.bytes as i64;
            }
        }
        if let Some(p) = &pb {
            for g in pick(p) {
                m.entry(g.key.clone()).or_default().1 += g.bytes as i64;
            }
        }
        let mut v: Vec<(String, (i64, i64))> = m.into_iter().collect();
        v.sort_by_key(|(_, (x, y))| -(x.max(y)));
        // A run without a stored peak has no composition: its side is missing, not 0 B.
        for (k, (x, y)) in v.into_iter().take(30) {
            page.rows.push(row(
                if sized { size_class_label(&k) } else { k },
                pa.as_ref().map(|_| x),
                pb.as_ref().map(|_| y),
            ));
        }
    }
    html(&page)
}

/// The framework section of the comparison: both runs' framework memory (PyTorch
/// allocated, or all live PJRT buffers) on one chart, aligned like the driver chart, and
/// their peaks, last values and producers' peaks side by side. Nothing when neither run
/// has framework records on the chosen devices.
async fn framework(
    st: &AppState,
    page: &mut ComparePage,
    (a, da, ea, sa): (i64, i64, u64, u64),
    (b, db, eb, sb): (i64, i64, u64, u64),
    end: u64,
) -> Result<(), AppError> {
    // Same bucket width for both runs, as on the driver chart.
    let pts = (CHART_W - 100) as u64;
    let share = |e: u64| ((pts * e).div_ceil(end.max(1)) as usize).max(1);
    let fa = crate::framework::summary(&st.store, a, da, ea, share(ea)).await?;
    let fb = crate::framework::summary(&st.store, b, db, eb, share(eb)).await?;
    if fa.is_none() && fb.is_none() {
        return Ok(());
    }
    let shifted = |f: &Option<crate::framework::FrameworkSummary>, by: u64| {
        f.as_ref().map_or_else(Vec::new, |f| {
            f.points
                .iter()
                .map(|x| Point {
                    t_ns: x.t_ns + by,
                    ..*x
                })
                .collect::<Vec<_>>()
        })
    };
    let (pa, pb) = (shifted(&fa, sa), shifted(&fb, sb));
    let mut series = Vec::new();
    if let Some(f) = &fa {
        series.push(Series {
            label: format!("A: {} {}", page.a_label, f.what),
            points: &pa,
            bucket_ns: f.bucket_ns,
            color: PALETTE[0],
            style: chart::Style::Band,
        });
    }
    if let Some(f) = &fb {
        series.push(Series {
            label: format!("B: {} {}", page.b_label, f.what),
            points: &pb,
            bucket_ns: f.bucket_ns,
            color: PALETTE[1],
            style: chart::Style::Band,
        });
    }
    page.fw_svg = chart::timeline((CHART_W, CHART_H), 0, end, &series, &Marks::default())
        .map_err(AppError::internal)?
        .svg;
    let what = fa.as_ref().or(fb.as_ref()).map_or("", |f| f.what);
    let get =
        |f: &Option<crate::framework::FrameworkSummary>,
         pick: fn(&crate::framework::FrameworkSummary) -> i64| { f.as_ref().map(pick) };
    page.fw_rows.push(row(
        format!("peak {what}"),
        get(&fa, |f| f.peak),
        get(&fb, |f| f.peak),
    ));
    page.fw_rows.push(row(
        format!("{what} at the end"),
        get(&fa, |f| f.at_end),
        get(&fb, |f| f.at_end),
    ));
    let mut producers: BTreeMap<String, Sides> = BTreeMap::new();
    for (name, peak) in fa.iter().flat_map(|f| f.producers.iter()) {
        producers.entry(name.clone()).or_default().0 = Some(*peak);
    }
    for (name, peak) in fb.iter().flat_map(|f| f.producers.iter()) {
        producers.entry(name.clone()).or_default().1 = Some(*peak);
    }
    let mut v: Vec<(String, Sides)> = producers.into_iter().collect();
    v.sort_by_key(|(_, (x, y))| -(x.max(y).unwrap_or(0)));
    if !v.is_empty() {
        page.fw_rows.push(CompareRow {
            header: true,
            key: if what == "allocated" {
                "allocation site (the most it held at once)".into()
            } else {
                "producing executable (peak of its live outputs)".into()
            },
            a: String::new(),
            b: String::new(),
            delta: String::new(),
            cls: "",
        });
    }
    for (name, (x, y)) in v.into_iter().take(30) {
        page.fw_rows.push(row(name, x, y));
    }
    Ok(())
}

/// A figure of run A and of run B (`None`: that run has none).
type Sides = (Option<i64>, Option<i64>);

/// One compared figure; a side without it shows "—" (not recorded), never 0 B, and
/// then no difference is given.
fn row(key: String, x: Option<i64>, y: Option<i64>) -> CompareRow {
    let (a, b) = (
        x.map_or_else(|| "—".into(), fmt::bytes),
        y.map_or_else(|| "—".into(), fmt::bytes),
    );
    match (x, y) {
        (Some(x), Some(y)) => CompareRow {
            header: false,
            key,
            a,
            b,
            delta: fmt::delta_bytes(y - x),
            cls: if y > x {
                "up"
            } else if y < x {
                "down"
            } else {
                ""
            },
        },
        _ => CompareRow {
            header: false,
            key,
            a,
            b,
            delta: "—".into(),
            cls: "",
        },
    }
}
