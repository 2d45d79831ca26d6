//! The run page (live-bytes chart per device with peak, failure and annotation marks,
//! API-call lanes, incidents, processes, annotations), its chart and lanes fragments for
//! zooming, and the server-sent-events stream of a live run.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::model::RunLite;
use super::outcome::{self, Outcome};
use super::views::{ProcessView, RunDeviceView, RunPage};
use super::{events, pre_attach, sql};
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::html;
use crate::app::state::AppState;
use crate::db::chunk;
use crate::incidents::{incident_view, verdict_view, FailureMarks};
use crate::render::chart::{self, Marks, Series, Tone, PALETTE};
use crate::render::{fmt, Point};

/// Pixel size of timeline charts (the SVG scales to the page width).
pub const CHART_W: u32 = 1200;
/// Incidents the run page lists (the newest); the page says how many there are.
pub(crate) const INCIDENTS_LISTED: i64 = 100;
pub const CHART_H: u32 = 320;

#[derive(Deserialize, Default)]
pub(crate) struct RangeQ {
    pub device: Option<i64>,
    pub from: Option<u64>,
    pub to: Option<u64>,
}

pub(crate) async fn load_run(st: &AppState, id: i64) -> Result<RunLite, AppError> {
    sql::run_lite(&st.store, id)
        .await?
        .ok_or_else(|| AppError::not_found(format!("There is no run #{id} in this database.")))
}

pub(crate) fn run_end(r: &RunLite) -> u64 {
    r.duration_ns.max(0) as u64 + 1
}

/// Clamps a requested range to the run; errors when `to <= from`.
pub(crate) fn range(q: &RangeQ, end: u64) -> Result<(u64, u64), AppError> {
    let from = q.from.unwrap_or(0).min(end.saturating_sub(1));
    let to = q.to.unwrap_or(end).min(end.max(1));
    if let (Some(f), Some(t)) = (q.from, q.to) {
        if t <= f {
            return Err(AppError::bad(format!(
                "the range end `to` ({t}) must be greater than `from` ({f})"
            )));
        }
    }
    Ok((from, to.max(from + 1)))
}

/// Device `device`'s driver chart over [from, to): its live bytes, what it held before an
/// attach (`held`: the run's pre-attach markers, read once by the caller) and the
/// device's own samples.
async fn device_chart(
    st: &AppState,
    run: &RunLite,
    device: i64,
    (from, to): (u64, u64),
    (failures, failure_tone): (FailureMarks, Tone),
    held: Option<&pre_attach::PreAttach>,
) -> Result<chart::Rendered, AppError> {
    let tl = st
        .store
        .timeline(
            run.id,
            device,
            Some(from),
            Some(to),
            (CHART_W - 100) as usize,
        )
        .await?
        .ok_or_else(|| AppError::not_found(format!("no run {}", run.id)))?;
    let d = run.devices.iter().find(|d| d.device == device);
    let (notes, _) = sql::annotations_in(&st.store, run.id, run.t0, from, to, 401).await?;
    let capacity = sql::device_capacity(&st.store, run.id, device).await?;
    let marks = Marks {
        capacity: capacity.map(|(_, b)| (format!("GPU {device} capacity"), b)),
        // A device with nothing allocated has no peak to mark (not a "peak 0 B").
        peak: d
            .filter(|d| d.peak_bytes > 0)
            .map(|d| (d.peak_ts_ns.max(0) as u64, d.peak_bytes)),
        failure_counts: Some((failures.in_range, failures.in_run)),
        failures: failures.times,
        failure_tone,
        annotations: notes
            .into_iter()
            .filter(|(_, d, _)| *d == device || *d < 0)
            .map(|(t, _, text)| (t, text))
            .collect(),
    };
    // "Reserved": what the device itself reports in use (VRAM samples of the node
    // agent: every process plus driver/context memory, so pools that keep freed memory
    // show here), drawn where the node sent samples for this device.
    let used = st
        .store
        .run_samples(run.id, device, 0, tl.from_ns, tl.bucket_ns, tl.points.len())
        .await?;
    // Memory the device held before an attach: its own line, from the attach on.
    let held: Vec<Point> = match held.and_then(|h| h.used.clone()) {
        Some((used, _)) => {
            let used = i64::try_from(used).unwrap_or(i64::MAX);
            (0..)
                .map(|i: u64| tl.from_ns + i * tl.bucket_ns.max(1))
                .take_while(|&t| t < tl.to_ns)
                .map(|t_ns| Point {
                    t_ns,
                    min: used,
                    max: used,
                    last: used,
                })
                .collect()
        }
        None => Vec::new(),
    };
    let mut series = vec![Series {
        label: format!("GPU {device} live bytes"),
        points: &tl.points,
        bucket_ns: tl.bucket_ns,
        color: PALETTE[0],
        style: chart::Style::Band,
    }];
    if !held.is_empty() {
        series.push(Series {
            label: "held before attach (device used at attach)".into(),
            points: &held,
            bucket_ns: tl.bucket_ns,
            color: PALETTE[3],
            style: chart::Style::Dashed,
        });
    }
    if !used.is_empty() {
        series.push(Series {
            label: "device used (VRAM samples)".into(),
            points: &used,
            bucket_ns: tl.bucket_ns,
            color: PALETTE[2],
            style: chart::Style::Band,
        });
    }
    chart::timeline((CHART_W, CHART_H), tl.from_ns, tl.to_ns, &series, &marks)
        .map_err(AppError::internal)
}

/// The failure marks of `device`'s chart over [from, to): one per chart column.
async fn failure_marks(
    st: &AppState,
    run: &RunLite,
    device: i64,
    from: u64,
    to: u64,
) -> Result<FailureMarks, AppError> {
    Ok(st
        .store
        .failure_marks(run.id, run.t0, device, (from, to), u64::from(CHART_W - 100))
        .await?)
}

/// The lanes fragment: a note plus (when the range is small enough) the SVG.
async fn lanes(
    st: &AppState,
    id: i64,
    from: u64,
    to: u64,
) -> Result<(String, chart::Rendered), AppError> {
    let empty = chart::Rendered {
        svg: String::new(),
        plot_left: 0,
        plot_right: 0,
    };
    let Some(set) = events::spans(&st.store, id, from, to).await? else {
        return Err(AppError::not_found(format!("no run {id}")));
    };
    if set.too_many {
        return Ok((
            format!(
                "This range holds about {} raw events; API calls are drawn for ranges of at most {} events. Drag across the timeline to zoom in.",
                set.raw_chunks * chunk::CHUNK_EVENTS as i64,
                events::SPAN_CHUNK_BUDGET * chunk::CHUNK_EVENTS as i64
            ),
            empty,
        ));
    }
    if set.raw_chunks == 0 {
        return Ok((
            "No raw events are stored for this range (none were recorded, or retention deleted them).".into(),
            empty,
        ));
    }
    if set.spans.is_empty() {
        return Ok(("No timed API calls in this range.".into(), empty));
    }
    let names: Vec<String> = set.lanes.iter().map(|(p, t)| format!("{p}/{t}")).collect();
    let spans: Vec<chart::Span> = set
        .spans
        .iter()
        .map(|&(lane, start, end, _)| chart::Span { lane, start, end })
        .collect();
    let r = chart::lanes(CHART_W, from, to, &names, &spans).map_err(AppError::internal)?;
    Ok((
        format!(
            "{} API calls on {} threads (pid/tid); each bar is one call from its start to its end.",
            set.spans.len(),
            set.lanes.len()
        ),
        r,
    ))
}

/// The run page's `format`: `json` for the run's data (the `/api/runs/{id}` document).
#[derive(Deserialize)]
pub(crate) struct FormatQ {
    format: Option<String>,
}

pub async fn run(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RangeQ>,
    Query(f): Query<FormatQ>,
) -> Result<Response, AppError> {
    match f.format.as_deref() {
        None | Some("html") => {}
        Some("json") => {
            return match st.store.run(id).await? {
                Some(r) => Ok(axum::Json(r).into_response()),
                None => Err(AppError::not_found(format!(
                    "There is no run #{id} in this database."
                ))),
            }
        }
        Some(other) => {
            return Err(AppError::bad(format!(
                "unknown format {other:?} (use format=json or leave it out)"
            )))
        }
    }
    let run = load_run(&st, id).await?;
    let end = run_end(&run);
    let (from, to) = range(&q, end)?;
    let incidents = st.store.incidents(Some(id), INCIDENTS_LISTED).await?;
    let counts = st.store.incident_counts(id, &incidents).await?;
    let diagnosis = st.store.diagnosis(id).await?;
    let facts = outcome::facts(&st.store, id, counts.any_oom, diagnosis.as_ref()).await?;
    let active = facts.active;
    let ended = outcome::decide(&facts);
    let tone = outcome::tone_of(&ended);
    let verdict = diagnosis.as_ref().and_then(verdict_view);
    let framework = crate::framework::sections(
        &st,
        &run,
        from,
        to,
        (verdict.as_ref().map(|v| v.kind.as_str()), tone),
    )
    .await?;
    let t0 = run.t0;
    let held = pre_attach::of_run(&st.store, id).await?;
    let mut devices = Vec::new();
    for d in run.devices.iter().filter(|d| d.shown()) {
        let fails = failure_marks(&st, &run, d.device, from, to).await?;
        let c = device_chart(
            &st,
            &run,
            d.device,
            (from, to),
            (fails, tone),
            held.get(&d.device),
        )
        .await?;
        let growing = if framework.iter().any(|f| f.device == d.device) || d.device < 0 {
            String::new()
        } else {
            crate::framework::driver_growing(&st.store, id, d.device, end)
                .await?
                .map(|g| crate::framework::growing_label(&g))
                .unwrap_or_default()
        };
        let held_before = held
            .get(&d.device)
            .map(pre_attach::line)
            .unwrap_or_default();
        let note = if d.alloc_count == 0 && d.peak_bytes == 0 && held_before.is_empty() {
            "No allocation was recorded on this device: memory allocated before the recording began (a pool made before an attach) is not in the driver view; the framework view and the device's samples show it where they were recorded.".to_string()
        } else {
            String::new()
        };
        // Which GPU it was: the node's device it is by identity (`devices`).
        let gpu = match super::devices::node_device(&st.store, id, d.device)
            .await?
            .0
        {
            Some(n) if n.name.is_empty() => String::new(),
            Some(n) if n.ordinal != d.device => {
                format!("{} (the node's GPU {})", n.name, n.ordinal)
            }
            Some(n) => n.name,
            None => String::new(),
        };
        devices.push(RunDeviceView {
            note,
            held_before,
            growing,
            gpu,
            device: d.device,
            label: d.label(),
            peak: fmt::bytes(d.peak_bytes),
            peak_at: fmt::duration(d.peak_ts_ns),
            live: fmt::bytes(d.live_bytes),
            allocs: d.alloc_count,
            frees: d.free_count,
            failed: d.failed_count,
            svg: c.svg,
            plot_left: c.plot_left,
            plot_right: c.plot_right,
        });
    }
    let (lanes_note, lanes_chart) = lanes(&st, id, from, to).await?;
    let ident = st
        .store
        .identities(&[(
            id,
            run.run_key.clone(),
            run.node.clone(),
            run.wall_anchor_unix_ns,
            run.created_unix_ns,
        )])
        .await?
        .remove(&id)
        .ok_or_else(|| AppError::internal("no identity"))?;
    let job = match &ident.launcher {
        Some(launch) => {
            let ids = st.store.job_siblings(id, launch).await?;
            let mut out = Vec::new();
            for other in ids {
                if let Ok(o) = load_run(&st, other).await {
                    let peak = o
                        .devices
                        .iter()
                        .filter(|d| d.shown())
                        .map(|d| format!("{} {}", d.label(), fmt::bytes(d.peak_bytes)))
                        .collect::<Vec<_>>()
                        .join(", ");
                    out.push((other, peak));
                }
            }
            out
        }
        None => Vec::new(),
    };
    let page = RunPage {
        id,
        framework,
        title: ident.title,
        subtitle: ident.subtitle,
        job,
        launcher_pid: ident.launcher.as_ref().map_or(0, |l| l.ppid),
        verdict,
        snapshot: crate::snapshot::run_facts(&st, &run).await?,
        node: run.node.clone(),
        started: fmt::wall(ident.started_unix_ns),
        started_label: if ident.started_basis == "stored" {
            "Stored"
        } else {
            "Started"
        },
        duration: fmt::duration(run.duration_ns),
        events: run.event_count,
        dropped: run.dropped_events,
        failures: counts.all,
        active,
        status: outcome::badge(&ended),
        tone: outcome::tone(&ended),
        crash: match ended {
            Outcome::Crashed(code) => {
                let line = outcome::logged_error(&st.store, id).await?;
                format!(
                    "It ended with {}{}",
                    outcome::exit_text(code),
                    line.map_or_else(
                        || " (no log with an error line is stored with the run)".to_string(),
                        |l| format!(": {l}")
                    )
                )
            }
            _ => String::new(),
        },
        recovered: ended == Outcome::Recovered,
        from,
        to,
        end,
        range_label: format!(
            "{} – {}",
            fmt::duration(from as i64),
            fmt::duration(to as i64)
        ),
        first_device: run
            .devices
            .iter()
            .find(|d| d.device >= 0)
            .map_or(0, |d| d.device),
        chart_width: CHART_W,
        devices,
        lanes_svg: lanes_chart.svg,
        lanes_note,
        lanes_left: lanes_chart.plot_left,
        lanes_right: lanes_chart.plot_right,
        incidents: incidents.iter().map(|i| incident_view(i, t0)).collect(),
        processes: sql::processes(&st.store, id)
            .await?
            .into_iter()
            .map(|p| ProcessView {
                pid: p.pid,
                ppid: p.ppid,
                host: p.hostname,
                argv: p.argv.join(" "),
                exit: p.exit_code.map_or_else(
                    || {
                        if active {
                            "running".into()
                        } else {
                            "not recorded".into()
                        }
                    },
                    |c| c.to_string(),
                ),
                dropped: p.dropped_events,
            })
            .collect(),
        annotations: sql::annotations_in(&st.store, id, t0, 0, end, 500)
            .await?
            .0
            .into_iter()
            .map(|(t, _, text)| (fmt::duration(t as i64), text))
            .collect(),
    };
    html(&page)
}

/// One device's chart for a range; the plot area's pixel edges in headers.
pub async fn chart_svg(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RangeQ>,
) -> Result<Response, AppError> {
    let RangeChart {
        from, to, chart: c, ..
    } = range_chart(&st, id, &q).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml".to_string()),
            (
                header::HeaderName::from_static("x-plot-left"),
                c.plot_left.to_string(),
            ),
            (
                header::HeaderName::from_static("x-plot-right"),
                c.plot_right.to_string(),
            ),
            (
                header::HeaderName::from_static("x-range-from"),
                from.to_string(),
            ),
            (
                header::HeaderName::from_static("x-range-to"),
                to.to_string(),
            ),
        ],
        c.svg,
    )
        .into_response())
}

pub async fn lanes_fragment(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<RangeQ>,
) -> Result<Response, AppError> {
    let run = load_run(&st, id).await?;
    let (from, to) = range(&q, run_end(&run))?;
    let (note, c) = lanes(&st, id, from, to).await?;
    let note = escape(&note);
    let body = if c.svg.is_empty() {
        format!("<p class=\"muted\">{note}</p>")
    } else {
        format!(
            "<p class=\"muted small\">{note}</p><div class=\"svgbox\" role=\"img\" aria-label=\"API calls per thread\">{}</div>",
            c.svg
        )
    };
    Ok((
        [
            (
                header::HeaderName::from_static("x-plot-left"),
                c.plot_left.to_string(),
            ),
            (
                header::HeaderName::from_static("x-plot-right"),
                c.plot_right.to_string(),
            ),
        ],
        Html(body),
    )
        .into_response())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Server-sent events while a run is live: `progress` when new events arrived, `end`
/// when the run stopped (then the stream closes).
pub async fn live(
    State(st): State<AppState>,
    Path(id): Path<i64>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, AppError> {
    let first = sql::run_progress(&st.store, id)
        .await?
        .ok_or_else(|| AppError::not_found(format!("There is no run #{id}.")))?;
    let store = st.store.clone();
    let s = stream::unfold(
        (store, Some(first), false),
        move |(store, last, done)| async move {
            if done {
                return None;
            }
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = sql::run_progress(&store, id).await.ok().flatten();
                let active = sql::run_active(&store, id).await.unwrap_or(false);
                if !active {
                    let ev = Event::default().event("end").data("{}");
                    return Some((Ok(ev), (store, now, true)));
                }
                if now.is_some() && now != last {
                    let (events, dur) = now.unwrap_or((0, 0));
                    let body = serde_json::json!({
                        "events": events,
                        "duration_ns": dur,
                        "duration": fmt::duration(dur),
                    });
                    let ev = Event::default().event("progress").data(body.to_string());
                    return Some((Ok(ev), (store, now, false)));
                }
            }
        },
    );
    Ok(Sse::new(s).keep_alive(KeepAlive::default()))
}

/// One device's chart as `/chart.svg` and the exports serve it: `device` (default 0) over
/// the query's range `(from, to)`, with its failures marked.
pub(crate) struct RangeChart {
    pub device: i64,
    pub from: u64,
    pub to: u64,
    pub chart: chart::Rendered,
}

pub(crate) async fn range_chart(
    st: &AppState,
    id: i64,
    q: &RangeQ,
) -> Result<RangeChart, AppError> {
    let run = load_run(st, id).await?;
    let (from, to) = range(q, run_end(&run))?;
    let device = q.device.unwrap_or(0);
    let fails = failure_marks(st, &run, device, from, to).await?;
    let tone = outcome::failure_tone(&st.store, id).await?;
    let held = pre_attach::of_run(&st.store, id).await?;
    let chart = device_chart(
        st,
        &run,
        device,
        (from, to),
        (fails, tone),
        held.get(&device),
    )
    .await?;
    Ok(RangeChart {
        device,
        from,
        to,
        chart,
    })
}
