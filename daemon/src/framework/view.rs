//! The framework view on the run page, per device: the allocator chart (JAX: PJRT bytes
//! in use, pool, limit and all live buffers; PyTorch: allocated vs reserved), live buffers
//! stacked by producing executable, the executions and compile lanes, the OOM mark with
//! its verdict, the line that reconciles the framework's figures with the driver's, and
//! growth per executable. Each chart is also served alone for zooming
//! (`/runs/{id}/framework/{part}.svg`).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use memwatch_wire::Api;
use serde::Deserialize;

use super::growth::{self, ExecutableGrowth, GROWTH_POINTS};
use super::read::{ensure_built, read, FrameworkTimeline};
use super::reconcile::reconcile;
use super::series;
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::state::AppState;
use crate::codes;
use crate::incidents::FailureMarks;
use crate::render::chart::{self, Marks, Series, Span, Style, Tone, PALETTE};
use crate::render::stack::{stacked, Buckets, Layer};
use crate::render::{fmt, Point};
use crate::runs::{load_run, range, run_end, RangeQ, RunLite, CHART_H, CHART_W};
use crate::snapshot::StackView;

/// Layers drawn by name in the stacked chart; the rest are summed as "other".
const TOP_PRODUCERS: usize = 7;

/// One device's framework view, ready for the template.
pub(crate) struct FrameworkSection {
    pub device: i64,
    pub label: String,
    /// "JAX / PJRT" or "PyTorch".
    pub framework: &'static str,
    pub memory: chart::Rendered,
    pub stack: Option<chart::Rendered>,
    pub lanes: Option<chart::Rendered>,
    pub reconcile: String,
    /// (name, executions, live at end, peak, growth, per execution, growing).
    pub growth: Vec<GrowthRow>,
    /// "growing: +X/s in NAME" when the run keeps accumulating.
    pub growing: Option<String>,
    /// PyTorch: allocated bytes by Python line near the peak.
    pub sites: Option<SitesAtPeak>,
}

/// Allocated bytes by site (the innermost Python line outside PyTorch) at one instant:
/// the end of the finest stored interval whose end holds the most allocated. The rows
/// (the largest [`SITE_ROWS`], then the rest as one) sum to `total`.
pub(crate) struct SitesAtPeak {
    /// When (offset from the run's start).
    pub at: String,
    pub total: String,
    /// The most allocated at any instant, and when.
    pub peak: String,
    pub peak_at: String,
    /// (site, bytes, share of total, the site's stack).
    pub rows: Vec<(String, String, String, StackView)>,
}

/// Sites listed by name under the stacked chart; the rest are one row.
const SITE_ROWS: usize = 15;

pub(crate) struct GrowthRow {
    pub name: String,
    pub executions: i64,
    pub live_end: String,
    pub live_peak: String,
    pub growth: String,
    pub per_execution: String,
    pub growing: bool,
    /// PyTorch: the site's stack, titled by the user's frame.
    pub stack: StackView,
}

fn growth_row(g: &ExecutableGrowth) -> GrowthRow {
    GrowthRow {
        name: g.name.clone(),
        executions: g.executions,
        live_end: fmt::bytes(g.live_end),
        live_peak: fmt::bytes(g.live_peak),
        growth: if g.growing {
            fmt::delta_bytes(g.growth_bytes)
        } else {
            "–".into()
        },
        per_execution: if g.growing && g.per_execution > 0 {
            fmt::delta_bytes(g.per_execution)
        } else {
            "–".into()
        },
        growing: g.growing,
        stack: StackView::untitled(&g.name),
    }
}

/// Where the OOM marks go and what they say.
pub(crate) struct OomMarks {
    /// Failures on this device in the range shown, one per chart column.
    pub failures: FailureMarks,
    /// The stored verdict's badge, carried by the mark.
    pub verdict: Option<String>,
    /// How the marks read (`runs::failure_tone`: red only for a run that ended out of
    /// memory).
    pub tone: Tone,
    /// The device's memory (label, bytes), when the node said.
    pub capacity: Option<(String, i64)>,
}

/// The framework view of every device of `run` that has framework records.
pub(crate) async fn sections(
    st: &AppState,
    run: &RunLite,
    from: u64,
    to: u64,
    (verdict, tone): (Option<&str>, Tone),
) -> Result<Vec<FrameworkSection>, AppError> {
    ensure_built(&st.store, run.id).await?;
    let mut out = Vec::new();
    for d in run.devices.iter().filter(|d| d.shown()) {
        let oom = OomMarks {
            failures: failure_marks(st, run, d.device, (from, to)).await?,
            verdict: verdict.map(str::to_string),
            tone,
            capacity: capacity_of(st, run.id, d.device).await?,
        };
        if let Some(s) = section(st, run, d.device, from, to, &oom).await? {
            out.push(s);
        }
    }
    Ok(out)
}

async fn section(
    st: &AppState,
    run: &RunLite,
    device: i64,
    from: u64,
    to: u64,
    oom: &OomMarks,
) -> Result<Option<FrameworkSection>, AppError> {
    let points = (CHART_W - 100) as usize;
    let Some(tl) = read(&st.store, run.id, device, from, to, points).await? else {
        return Ok(None);
    };
    let driver = st
        .store
        .timeline(run.id, device, Some(from), Some(to), points)
        .await?;
    let memory = memory_chart(
        &tl,
        driver.as_ref().map(|t| (&t.points[..], t.bucket_ns)),
        oom,
    )?;
    let stack = stack_chart(&tl, (&oom.failures.times, oom.tone))?;
    let lanes = lanes_chart(st, run, &tl).await?;
    let whole = read(&st.store, run.id, device, 0, run_end(run), GROWTH_POINTS).await?;
    let (rows, growing) = match &whole {
        Some(w) => {
            let leaks = super::step_leaks(&st.store, run.id, device, run_end(run)).await?;
            (
                growth::per_executable(w, &leaks)
                    .iter()
                    .take(20)
                    .map(growth_row)
                    .collect(),
                growth::growing(w, &leaks).map(|g| growing_label(&g)),
            )
        }
        None => (Vec::new(), None),
    };
    let mut sites = match &whole {
        Some(w) if tl.is_torch() => sites_at_peak(st, run.id, device, w).await?,
        _ => None,
    };
    let mut rows = rows;
    if tl.is_torch() {
        with_stacks(st, run.id, &mut sites, &mut rows).await?;
    }
    Ok(Some(FrameworkSection {
        device,
        label: crate::runs::device_label(device),
        framework: if tl.is_torch() {
            "PyTorch"
        } else {
            "JAX / PJRT"
        },
        reconcile: reconcile(&tl, driver.as_ref().map(|t| (&t.points[..], t.bucket_ns))),
        memory,
        stack,
        lanes,
        growth: rows,
        growing,
        sites,
    }))
}

/// Gives each PyTorch site row the stack of its site (the first of the run's stacks
/// with that site), so the row is titled by the user's frame with every frame below.
async fn with_stacks(
    st: &AppState,
    run: i64,
    sites: &mut Option<SitesAtPeak>,
    growth: &mut [GrowthRow],
) -> Result<(), AppError> {
    // Rows that name a site (not "unknown", not the rest summed) have a stack.
    let mut names: std::collections::BTreeSet<String> =
        growth.iter().map(|g| g.name.clone()).collect();
    if let Some(s) = sites.as_ref() {
        names.extend(s.rows.iter().take(SITE_ROWS).map(|r| r.0.clone()));
    }
    names.remove(memwatch_analysis::torch::stacks::UNKNOWN_SITE);
    let found = crate::snapshot::stacks_of_sites(&st.store, run, &names).await?;
    let view = |name: &str| match found.get(name) {
        Some(frames) => StackView::of(frames),
        None => StackView::untitled(name),
    };
    if let Some(s) = sites.as_mut() {
        for r in &mut s.rows {
            r.3 = view(&r.0);
        }
    }
    for g in growth {
        g.stack = view(&g.name);
    }
    Ok(())
}

/// The point of `points` starting at `t_ns`.
fn at_bucket(points: &[Point], t_ns: u64) -> Option<&Point> {
    points.iter().find(|p| p.t_ns == t_ns)
}

/// [`SitesAtPeak`] of a PyTorch device, from its per-site series (`whole`: the whole
/// run, coarse; the interval holding the peak is read again at the finest level).
async fn sites_at_peak(
    st: &AppState,
    run: i64,
    device: i64,
    whole: &FrameworkTimeline,
) -> Result<Option<SitesAtPeak>, AppError> {
    let top = |p: &[Point]| {
        p.iter()
            .max_by_key(|x| (x.max, std::cmp::Reverse(x.t_ns)))
            .copied()
    };
    let Some(coarse) = whole.get(series::TORCH_ALLOCATED).and_then(top) else {
        return Ok(None);
    };
    let end = coarse.t_ns.saturating_add(whole.bucket_ns.max(1));
    let Some(fine) = read(&st.store, run, device, coarse.t_ns, end, 4096).await? else {
        return Ok(None);
    };
    let Some(alloc) = fine.get(series::TORCH_ALLOCATED) else {
        return Ok(None);
    };
    let Some(peak) = top(alloc) else {
        return Ok(None);
    };
    // The instant: the end of the interval whose end holds the most.
    let Some(at) = alloc
        .iter()
        .max_by_key(|x| (x.last, std::cmp::Reverse(x.t_ns)))
        .copied()
    else {
        return Ok(None);
    };
    let mut bytes: Vec<(String, i64)> = fine
        .series
        .iter()
        .filter_map(|(&s, p)| {
            let i = series::producer_of_live(s)?;
            let v = at_bucket(p, at.t_ns)?.last;
            let name = fine
                .producers
                .get(i as usize)
                .cloned()
                .unwrap_or_else(|| format!("site {i}"));
            (v > 0).then_some((name, v))
        })
        .collect();
    bytes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let total = at.last;
    let mut rows: Vec<(String, String, String, StackView)> = bytes
        .iter()
        .take(SITE_ROWS)
        .map(|(n, v)| {
            (
                n.clone(),
                fmt::bytes(*v),
                fmt::percent(*v, total),
                StackView::untitled(n),
            )
        })
        .collect();
    if bytes.len() > SITE_ROWS {
        let rest: i64 = bytes[SITE_ROWS..].iter().map(|x| x.1).sum();
        let name = format!("{} other lines", bytes.len() - SITE_ROWS);
        rows.push((
            name.clone(),
            fmt::bytes(rest),
            fmt::percent(rest, total),
            StackView::untitled(&name),
        ));
    }
    Ok(Some(SitesAtPeak {
        at: fmt::duration((at.t_ns.saturating_add(fine.bucket_ns)) as i64),
        total: fmt::bytes(total),
        peak: fmt::bytes(peak.max),
        peak_at: fmt::duration(peak.t_ns as i64),
        rows,
    }))
}

/// "+64.00 MiB per execution of jit_step (3.69 GiB kept)" where the growth has steps (the
/// doctor's per-step figure), else "+1.20 GiB/s in allocated blocks". A rate per second
/// over steps dispatched within milliseconds says nothing a user can act on.
pub(crate) fn growing_label(g: &growth::Growing) -> String {
    let step = if g.per_execution != 0 {
        Some((g.per_execution, "per execution of"))
    } else if g.per_step != 0 {
        Some((g.per_step, "per step in"))
    } else {
        None
    };
    match step {
        Some((bytes, unit)) => format!(
            "{} {unit} {} ({} kept)",
            fmt::delta_bytes(bytes),
            g.executable,
            fmt::bytes(g.growth_bytes.max(0))
        ),
        None => format!(
            "{}/s in {}",
            fmt::delta_bytes(g.bytes_per_s as i64),
            g.executable
        ),
    }
}

fn marks_of(tl: &FrameworkTimeline, oom: &OomMarks, peak_series: i64) -> Marks {
    let peak = tl.get(peak_series).and_then(|p| {
        p.iter()
            .max_by_key(|x| (x.max, std::cmp::Reverse(x.t_ns)))
            .map(|x| (x.t_ns, x.max))
    });
    let what = match oom.tone {
        Tone::Failure => "OOM",
        Tone::Warning => "refused",
    };
    let text = oom
        .verdict
        .as_ref()
        .map_or_else(|| what.to_string(), |kind| format!("{what}: {kind}"));
    Marks {
        peak,
        capacity: oom.capacity.clone(),
        failures: oom.failures.times.clone(),
        failure_tone: oom.tone,
        failure_counts: Some((oom.failures.in_range, oom.failures.in_run)),
        annotations: oom
            .failures
            .first
            .map(|t| (t, text.clone()))
            .into_iter()
            .collect(),
    }
}

/// Colours of the per-process pool lines (after the four of the summed series).
const PROCESS_COLORS: [plotters::style::RGBColor; 4] = [
    plotters::style::RGBColor(0, 158, 115),
    plotters::style::RGBColor(213, 94, 0),
    plotters::style::RGBColor(86, 140, 200),
    plotters::style::RGBColor(120, 120, 40),
];

/// The processes whose allocator statistics have their own series on this device.
pub(crate) fn process_pools(tl: &FrameworkTimeline) -> Vec<i64> {
    let mut pids: Vec<i64> = tl
        .series
        .keys()
        .filter_map(|&s| series::process_of(s))
        .filter(|&(_, k)| k == series::PROCESS_POOL)
        .map(|(pid, _)| pid)
        .collect();
    pids.dedup();
    pids
}

fn memory_chart(
    tl: &FrameworkTimeline,
    driver: Option<(&[Point], u64)>,
    oom: &OomMarks,
) -> Result<chart::Rendered, AppError> {
    let mut lines: Vec<Series> = Vec::new();
    let named = |s: i64, label: &str, color| {
        tl.get(s)
            .map(|points| Series::band(label, points, tl.bucket_ns, color))
    };
    let peak_series = if tl.is_torch() {
        lines.extend(named(
            series::TORCH_ALLOCATED,
            "allocated (live blocks)",
            PALETTE[0],
        ));
        if let Some((points, bucket_ns)) = driver {
            lines.push(Series::band(
                "reserved (cudaMalloc segments)",
                points,
                bucket_ns,
                PALETTE[1],
            ));
        }
        series::TORCH_ALLOCATED
    } else {
        let pids = process_pools(tl);
        if pids.len() > 1 {
            // One line per process's pool (and its limit, dashed, in the same colour);
            // the device's total is their sum, in use summed over the processes.
            lines.extend(named(
                series::IN_USE,
                &format!("in use, {} processes summed", pids.len()),
                PALETTE[0],
            ));
            lines.extend(named(
                series::POOL,
                &format!("pools summed ({} processes)", pids.len()),
                PALETTE[1],
            ));
            for (k, &pid) in pids.iter().enumerate() {
                let c = PROCESS_COLORS[k % PROCESS_COLORS.len()];
                lines.extend(named(
                    series::of_process(pid, series::PROCESS_POOL),
                    &format!("pid {pid} pool"),
                    c,
                ));
                lines.extend(
                    named(
                        series::of_process(pid, series::PROCESS_LIMIT),
                        &format!("pid {pid} limit"),
                        c,
                    )
                    .map(|s| Series {
                        style: Style::Dashed,
                        ..s
                    }),
                );
            }
        } else {
            lines.extend(named(series::IN_USE, "allocator in use", PALETTE[0]));
            lines.extend(named(series::POOL, "allocator pool", PALETTE[1]));
            // The limit dashed over the pool: where the pool is preallocated to its
            // limit the two coincide and both stay visible.
            lines.extend(
                named(series::LIMIT, "allocator limit", PALETTE[2]).map(|s| Series {
                    style: Style::Dashed,
                    ..s
                }),
            );
        }
        lines.extend(named(
            series::LIVE_BUFFERS,
            "live buffers (jax.Array)",
            PALETTE[3],
        ));
        if tl.has_allocator() {
            series::IN_USE
        } else {
            series::LIVE_BUFFERS
        }
    };
    chart::timeline(
        (CHART_W, CHART_H),
        tl.from_ns,
        tl.to_ns,
        &lines,
        &marks_of(tl, oom, peak_series),
    )
    .map_err(AppError::internal)
}

fn stack_chart(
    tl: &FrameworkTimeline,
    failures: (&[u64], Tone),
) -> Result<Option<chart::Rendered>, AppError> {
    let mut producers: Vec<(i64, &[Point], i64)> = tl
        .series
        .iter()
        .filter_map(|(&s, p)| {
            series::producer_of_live(s)
                .map(|i| (i, &p[..], p.iter().map(|x| x.max).max().unwrap_or(0)))
        })
        .filter(|p| p.2 > 0)
        .collect();
    if producers.is_empty() {
        return Ok(None);
    }
    producers.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let n = producers[0].1.len();
    let starts: Vec<u64> = producers[0].1.iter().map(|p| p.t_ns).collect();
    let name = |i: i64| {
        tl.producers
            .get(i as usize)
            .cloned()
            .unwrap_or_else(|| format!("producer {i}"))
    };
    let mut layers: Vec<Layer> = producers
        .iter()
        .take(TOP_PRODUCERS)
        .map(|(i, p, _)| Layer {
            label: name(*i),
            values: p.iter().map(|x| x.last).collect(),
        })
        .collect();
    if producers.len() > TOP_PRODUCERS {
        let mut other = vec![0i64; n];
        for (_, p, _) in &producers[TOP_PRODUCERS..] {
            for (o, x) in other.iter_mut().zip(p.iter()) {
                *o += x.last;
            }
        }
        layers.push(Layer {
            label: format!("{} others", producers.len() - TOP_PRODUCERS),
            values: other,
        });
    }
    stacked(
        (CHART_W, CHART_H),
        &Buckets {
            from: tl.from_ns,
            to: tl.to_ns,
            starts: &starts,
            bucket_ns: tl.bucket_ns,
        },
        &layers,
        tl.get(series::LIVE_BUFFERS),
        failures,
    )
    .map(Some)
    .map_err(AppError::internal)
}

#[derive(sqlx::FromRow)]
struct CompileRow {
    api: i64,
    ts_ns: i64,
    duration_ns: i64,
}

async fn lanes_chart(
    st: &AppState,
    run: &RunLite,
    tl: &FrameworkTimeline,
) -> Result<Option<chart::Rendered>, AppError> {
    let mut spans = Vec::new();
    if let Some(ex) = tl.get(series::EXECUTIONS) {
        for p in ex.iter().filter(|p| p.min > 0) {
            // A bucket with executions is drawn whole (one bucket is about a pixel).
            spans.push(Span {
                lane: 0,
                start: p.t_ns,
                end: p.t_ns + tl.bucket_ns,
            });
        }
    }
    let compiles: Vec<CompileRow> = sqlx::query_as(
        "SELECT api, ts_ns, duration_ns FROM pjrt_compiles WHERE run_id = $1 AND ts_ns >= $2 AND ts_ns < $3 \
         ORDER BY ts_ns LIMIT 20000",
    )
    .bind(run.id)
    .bind(run.t0.saturating_add(tl.from_ns as i64))
    .bind(run.t0.saturating_add(tl.to_ns as i64))
    .fetch_all(&st.store.pool)
    .await
    .map_err(crate::db::StoreError::from)?;
    let min_w = (tl.to_ns - tl.from_ns) / 600;
    for c in &compiles {
        let start = (c.ts_ns - run.t0).max(0) as u64;
        let lane = if codes::api(c.api as u16) == Api::PjrtDeserializeAndLoad {
            2
        } else {
            1
        };
        spans.push(Span {
            lane,
            start,
            end: start + (c.duration_ns.max(0) as u64).max(min_w),
        });
    }
    if spans.is_empty() {
        return Ok(None);
    }
    let names = [
        "executions".to_string(),
        "compiles".to_string(),
        "loads".to_string(),
    ];
    let lanes = if spans.iter().any(|s| s.lane == 2) {
        3
    } else {
        2
    };
    chart::lanes(CHART_W, tl.from_ns, tl.to_ns, &names[..lanes], &spans)
        .map(Some)
        .map_err(AppError::internal)
}

#[derive(Deserialize, Default)]
pub(crate) struct PartQ {
    pub device: Option<i64>,
    pub from: Option<u64>,
    pub to: Option<u64>,
}

/// `GET /runs/{id}/framework/{part}.svg`: one chart of the framework view (`memory`,
/// `stack`, `lanes`) for the zooming script.
pub(crate) async fn part_svg(
    State(st): State<AppState>,
    Path((id, part)): Path<(i64, String)>,
    Query(q): Query<PartQ>,
) -> Result<Response, AppError> {
    let run = load_run(&st, id).await?;
    let end = run_end(&run);
    let (from, to) = range(
        &RangeQ {
            device: q.device,
            from: q.from,
            to: q.to,
        },
        end,
    )?;
    let device = q.device.unwrap_or(0);
    ensure_built(&st.store, id).await?;
    let points = (CHART_W - 100) as usize;
    let tl = read(&st.store, id, device, from, to, points)
        .await?
        .ok_or_else(|| {
            AppError::not_found(format!("run {id} has no framework records on GPU {device}"))
        })?;
    let oom = OomMarks {
        failures: failure_marks(&st, &run, device, (from, to)).await?,
        verdict: None,
        tone: crate::runs::failure_tone(&st.store, id).await?,
        capacity: capacity_of(&st, id, device).await?,
    };
    let r = match part.as_str() {
        "memory.svg" => {
            let driver = st
                .store
                .timeline(id, device, Some(from), Some(to), points)
                .await?;
            Some(memory_chart(
                &tl,
                driver.as_ref().map(|t| (&t.points[..], t.bucket_ns)),
                &oom,
            )?)
        }
        "stack.svg" => stack_chart(&tl, (&oom.failures.times, oom.tone))?,
        "lanes.svg" => lanes_chart(&st, &run, &tl).await?,
        other => {
            return Err(AppError::not_found(format!(
                "no framework chart `{other}` (memory.svg, stack.svg, lanes.svg)"
            )))
        }
    };
    let r = r.unwrap_or(chart::Rendered {
        svg: String::new(),
        plot_left: 0,
        plot_right: 0,
    });
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml".to_string()),
            (
                header::HeaderName::from_static("x-plot-left"),
                r.plot_left.to_string(),
            ),
            (
                header::HeaderName::from_static("x-plot-right"),
                r.plot_right.to_string(),
            ),
        ],
        r.svg,
    )
        .into_response())
}

async fn capacity_of(
    st: &AppState,
    run: i64,
    device: i64,
) -> Result<Option<(String, i64)>, AppError> {
    Ok(crate::runs::device_capacity(&st.store, run, device)
        .await?
        .map(|(_, b)| (format!("GPU {device} capacity"), b)))
}

/// The failed requests of `device` (failed allocations and failed executes, as the
/// incidents list has them) over [from, to): one mark per chart column.
async fn failure_marks(
    st: &AppState,
    run: &RunLite,
    device: i64,
    range: (u64, u64),
) -> Result<FailureMarks, AppError> {
    Ok(st
        .store
        .failure_marks(run.id, run.t0, device, range, u64::from(CHART_W - 100))
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn growing(per_execution: i64, per_step: i64) -> growth::Growing {
        growth::Growing {
            executable: "jit_update".into(),
            growth_bytes: 3_959_422_976,
            bytes_per_s: 236_000_000_000.0,
            per_execution,
            per_step,
        }
    }

    /// A growth with steps reads per step, never as a rate over calls dispatched within
    /// milliseconds; a ramp without steps reads per second.
    #[test]
    fn growth_reads_per_step_where_there_are_steps() {
        assert_eq!(
            growing_label(&growing(64 << 20, 64 << 20)),
            "+64.00 MiB per execution of jit_update (3.69 GiB kept)"
        );
        assert_eq!(
            growing_label(&growing(0, 244 << 20)),
            "+244.00 MiB per step in jit_update (3.69 GiB kept)"
        );
        assert_eq!(growing_label(&growing(0, 0)), "+219.79 GiB/s in jit_update");
    }
}
