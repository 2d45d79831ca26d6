//! Page handlers: gather data from the store, build the view models of `views`, render.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::time::Duration;

use crate::extract::{PagePath, PageQuery};
use axum::body::Body;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde::Deserialize;

use super::chart::{self, Marks, Series, PALETTE};
use super::views::*;
use super::{data, export, fmt, html, WebError};
use crate::api::AppState;
use crate::store::query::{IncidentRow, Peak, RunRow};
use data::RunLite;

/// Pixel size of timeline charts (the SVG scales to the page width).
pub const CHART_W: u32 = 1200;
pub const CHART_H: u32 = 320;

/// Allocation error codes that mean "out of memory" (hipErrorOutOfMemory = 2,
/// cudaErrorMemoryAllocation = 2, CUDA_ERROR_OUT_OF_MEMORY = 2).
fn is_oom(result: i64) -> bool {
    result == 2
}

fn device_peak(r: &RunRow) -> (i64, String) {
    match r.devices.iter().max_by_key(|d| d.peak_bytes) {
        Some(d) if r.devices.len() > 1 => (d.peak_bytes, format!("GPU {}", d.device)),
        Some(d) => (d.peak_bytes, String::new()),
        None => (0, String::new()),
    }
}

pub async fn overview(State(st): State<AppState>) -> Result<Response, WebError> {
    let nodes = st.store.nodes().await?;
    let runs = st.store.runs(100).await?;
    let oom_runs: BTreeSet<i64> = st
        .store
        .incidents(None, 10_000)
        .await?
        .iter()
        .filter(|i| is_oom(i.result))
        .map(|i| i.run_id)
        .collect();
    let mut rows = Vec::with_capacity(runs.len());
    for r in &runs {
        let (peak, peak_device) = device_peak(r);
        rows.push(RunListRow {
            id: r.id,
            key: r.run_key.clone(),
            node: r.node.clone(),
            started: fmt::wall(r.wall_anchor_unix_ns),
            duration: fmt::duration(r.duration_ns),
            events: r.event_count,
            peak: fmt::bytes(peak),
            peak_device,
            failures: r.devices.iter().map(|d| d.failed_count).sum(),
            oom: oom_runs.contains(&r.id),
            active: data::run_active(&st.store, r.id).await?,
            dropped: r.dropped_events,
        });
    }
    let ids = st.store.node_ids().await?;
    let mut views = Vec::with_capacity(nodes.len());
    for n in nodes {
        let node_id = ids.get(&n.name).copied().unwrap_or(-1);
        let mut devices = Vec::with_capacity(n.devices.len());
        for d in n.devices {
            let mut mems = Vec::with_capacity(d.samples.len());
            for s in &d.samples {
                let code = match s.memory {
                    "vram" => 0,
                    "gtt" => 1,
                    _ => 2,
                };
                // The last hour of this memory's samples, on the node's own clock.
                let hist = st
                    .store
                    .sample_history(node_id, d.ordinal, code, s.ts_ns - 3_600_000_000_000, 240)
                    .await?;
                let (spark, spark_note) = if hist.len() >= 2 {
                    let svg = super::dash_charts::sparkline(260, 40, &hist)
                        .map_err(WebError::Internal)?;
                    let hi = hist.iter().map(|p| p.1).max().unwrap_or(0);
                    let span = hist.last().map_or(0, |l| l.0) - hist.first().map_or(0, |f| f.0);
                    (
                        svg,
                        format!("last {}: highest {}", fmt::duration(span), fmt::bytes(hi)),
                    )
                } else {
                    (String::new(), String::new())
                };
                mems.push(MemView {
                    label: match s.memory {
                        "vram" => "VRAM",
                        "gtt" => "GTT",
                        _ => "other",
                    },
                    used: fmt::bytes(s.used_bytes),
                    total: fmt::bytes(s.total_bytes),
                    pct_int: if s.total_bytes > 0 {
                        (s.used_bytes.saturating_mul(100) / s.total_bytes).clamp(0, 100)
                    } else {
                        0
                    },
                    source: s.source.clone(),
                    spark,
                    spark_note,
                });
            }
            devices.push(DeviceView {
                ordinal: d.ordinal,
                name: d.name,
                vendor: d.vendor,
                total: fmt::bytes(d.total_bytes),
                mems,
            });
        }
        views.push(NodeView {
            name: n.name,
            last_seen: fmt::wall(n.last_seen_unix_ns),
            devices,
        });
    }
    let nodes = views;
    // Processes with no recorded end whose node reported in the last 10 minutes.
    let running = st.store.running_processes(600_000_000_000).await?;
    html(&Overview {
        db_hint: "memwatch.db".into(),
        nodes,
        runs: rows,
        running,
    })
}

#[derive(Deserialize, Default)]
pub struct RangeQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
}

async fn load_run(st: &AppState, id: i64) -> Result<RunLite, WebError> {
    data::run_lite(&st.store, id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("There is no run #{id} in this database.")))
}

fn run_end(r: &RunLite) -> u64 {
    r.duration_ns.max(0) as u64 + 1
}

/// Clamps a requested range to the run; errors when `to <= from`.
fn range(q: &RangeQ, end: u64) -> Result<(u64, u64), WebError> {
    let from = q.from.unwrap_or(0).min(end.saturating_sub(1));
    let to = q.to.unwrap_or(end).min(end.max(1));
    if let (Some(f), Some(t)) = (q.from, q.to) {
        if t <= f {
            return Err(WebError::Bad(format!(
                "the range end `to` ({t}) must be greater than `from` ({f})"
            )));
        }
    }
    Ok((from, to.max(from + 1)))
}

fn rel(ts: i64, t0: i64) -> u64 {
    (ts - t0).max(0) as u64
}

async fn device_chart(
    st: &AppState,
    run: &RunLite,
    device: i64,
    from: u64,
    to: u64,
    failures: &[u64],
) -> Result<chart::Rendered, WebError> {
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
        .ok_or_else(|| WebError::NotFound(format!("no run {}", run.id)))?;
    let d = run.devices.iter().find(|d| d.device == device);
    let (notes, _) = data::annotations_in(&st.store, run.id, run.t0, from, to, 401).await?;
    let marks = Marks {
        peak: d.map(|d| (d.peak_ts_ns.max(0) as u64, d.peak_bytes)),
        failures: failures.to_vec(),
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
    let mut series = vec![Series {
        label: format!("GPU {device} live bytes"),
        points: &tl.points,
        bucket_ns: tl.bucket_ns,
        color: PALETTE[0],
    }];
    if !used.is_empty() {
        series.push(Series {
            label: "device used (VRAM samples)".into(),
            points: &used,
            bucket_ns: tl.bucket_ns,
            color: PALETTE[2],
        });
    }
    chart::timeline((CHART_W, CHART_H), tl.from_ns, tl.to_ns, &series, &marks)
        .map_err(WebError::Internal)
}

fn failure_times(incidents: &[IncidentRow], device: i64, t0: i64) -> Vec<u64> {
    incidents
        .iter()
        .filter(|i| i.device == device)
        .map(|i| rel(i.ts_ns, t0))
        .collect()
}

/// The lanes fragment: a note plus (when the range is small enough) the SVG.
async fn lanes(
    st: &AppState,
    id: i64,
    from: u64,
    to: u64,
) -> Result<(String, chart::Rendered), WebError> {
    let empty = chart::Rendered {
        svg: String::new(),
        plot_left: 0,
        plot_right: 0,
    };
    let Some(set) = data::spans(&st.store, id, from, to).await? else {
        return Err(WebError::NotFound(format!("no run {id}")));
    };
    if set.too_many {
        return Ok((
            format!(
                "This range holds about {} raw events; API calls are drawn for ranges of at most {} events. Drag across the timeline to zoom in.",
                set.raw_chunks * crate::store::state::CHUNK_EVENTS as i64,
                data::SPAN_CHUNK_BUDGET * crate::store::state::CHUNK_EVENTS as i64
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
    let r = chart::lanes(CHART_W, from, to, &names, &spans).map_err(WebError::Internal)?;
    Ok((
        format!(
            "{} API calls on {} threads (pid/tid); each bar is one call from its start to its end.",
            set.spans.len(),
            set.lanes.len()
        ),
        r,
    ))
}

pub async fn run(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<RangeQ>,
) -> Result<Response, WebError> {
    let run = load_run(&st, id).await?;
    let end = run_end(&run);
    let (from, to) = range(&q, end)?;
    let incidents = st.store.incidents(Some(id), 10_000).await?;
    let t0 = run.t0;
    let mut devices = Vec::new();
    for d in &run.devices {
        let fails = failure_times(&incidents, d.device, t0);
        let c = device_chart(&st, &run, d.device, from, to, &fails).await?;
        devices.push(RunDeviceView {
            device: d.device,
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
    let page = RunPage {
        id,
        key: run.run_key.clone(),
        node: run.node.clone(),
        started: fmt::wall(run.wall_anchor_unix_ns),
        duration: fmt::duration(run.duration_ns),
        events: run.event_count,
        dropped: run.dropped_events,
        failures: run.devices.iter().map(|d| d.failed_count).sum(),
        oom: incidents.iter().any(|i| is_oom(i.result)),
        active: data::run_active(&st.store, id).await?,
        from,
        to,
        end,
        range_label: format!(
            "{} – {}",
            fmt::duration(from as i64),
            fmt::duration(to as i64)
        ),
        first_device: run.devices.first().map_or(0, |d| d.device),
        chart_width: CHART_W,
        devices,
        lanes_svg: lanes_chart.svg,
        lanes_note,
        lanes_left: lanes_chart.plot_left,
        lanes_right: lanes_chart.plot_right,
        incidents: incidents.iter().map(|i| incident_view(i, t0)).collect(),
        processes: data::processes(&st.store, id)
            .await?
            .into_iter()
            .map(|(pid, host, argv, exit, dropped)| ProcessView {
                pid,
                host,
                argv: argv.join(" "),
                exit: exit.map_or("running or unknown".into(), |c| c.to_string()),
                dropped,
            })
            .collect(),
        annotations: data::annotations_in(&st.store, id, t0, 0, end, 500)
            .await?
            .0
            .into_iter()
            .map(|(t, _, text)| (fmt::duration(t as i64), text))
            .collect(),
    };
    html(&page)
}

fn incident_view(i: &IncidentRow, t0: i64) -> IncidentView {
    let at = rel(i.ts_ns, t0);
    let pad = 50_000_000u64.max(at / 20);
    IncidentView {
        id: i.id,
        run_id: i.run_id,
        node: i.node.clone(),
        at: fmt::duration(at as i64),
        zoom_from: at.saturating_sub(pad),
        zoom_to: at + pad,
        device: i.device,
        api: i.api.clone(),
        size: fmt::bytes(i.size),
        live: fmt::bytes(i.live_bytes),
        result: i.result,
        pid: i.pid,
        tid: i.tid,
    }
}

/// One device's chart for a range; the plot area's pixel edges in headers.
pub async fn chart_svg(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<RangeQ>,
) -> Result<Response, WebError> {
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
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<RangeQ>,
) -> Result<Response, WebError> {
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
    PagePath(id): PagePath<i64>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, WebError> {
    let first = data::run_progress(&st.store, id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("There is no run #{id}.")))?;
    let store = st.store.clone();
    let s = stream::unfold(
        (store, Some(first), false),
        move |(store, last, done)| async move {
            if done {
                return None;
            }
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = data::run_progress(&store, id).await.ok().flatten();
                let active = data::run_active(&store, id).await.unwrap_or(false);
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

#[derive(Deserialize)]
pub struct DeviceQ {
    device: Option<i64>,
    /// An instant (ns since the run's start) instead of the peak (Peak page only).
    at: Option<u64>,
    format: Option<String>,
}

/// Largest allocations listed in the peak page's expandable groups.
const PEAK_LIST: usize = 5_000;
const PER_GROUP: usize = 50;

fn size_class_key(size: u64) -> String {
    let class = 64 - size.saturating_sub(1).leading_zeros();
    format!("<= {} B", 1u128 << class)
}

fn size_class_label(key: &str) -> String {
    key.strip_prefix("<= ")
        .and_then(|k| k.strip_suffix(" B"))
        .and_then(|k| k.parse::<i64>().ok())
        .map_or_else(|| key.to_string(), |b| format!("≤ {}", fmt::bytes(b)))
}

pub async fn peak(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<DeviceQ>,
) -> Result<Response, WebError> {
    let run = load_run(&st, id).await?;
    let devices: Vec<i64> = run.devices.iter().map(|d| d.device).collect();
    let device = q.device.or(devices.first().copied()).unwrap_or(0);
    let json = match q.format.as_deref() {
        None | Some("html") => false,
        Some("json") => true,
        Some(f) => {
            return Err(WebError::Bad(format!(
                "unknown format {f:?} (use format=json)"
            )))
        }
    };
    let at = q.at.map(|t| t.min(run_end(&run)));
    // The PJRT attribution is about the runtime peak: shown on the peak view, not at an instant.
    let runtime = match at {
        None => super::runtime::panel(&st.store, id, device).await?,
        Some(_) => None,
    };
    let p = st.store.live_at(id, device, at, PEAK_LIST).await?;
    if json {
        return Ok(Json(
            serde_json::json!({ "run_id": id, "device": device, "at_ns": at, "live": p }),
        )
        .into_response());
    }
    let Some(p) = p else {
        return html(&PeakPage {
            id,
            device,
            devices,
            missing: true,
            peak: String::new(),
            peak_at: String::new(),
            zoom_from: 0,
            zoom_to: 0,
            live_allocations: 0,
            shown: 0,
            dims: Vec::new(),
            runtime,
            at,
            moved_from: None,
        });
    };
    let t = p.peak_ts_ns.max(0) as u64;
    let pad = 50_000_000u64.max(t / 20);
    html(&PeakPage {
        id,
        device,
        devices,
        missing: false,
        peak: fmt::bytes(p.peak_bytes),
        peak_at: fmt::duration(p.peak_ts_ns),
        zoom_from: t.saturating_sub(pad),
        zoom_to: t + pad,
        live_allocations: p.live_allocations,
        shown: p.largest.len() as u64,
        dims: peak_dims(&p),
        runtime,
        moved_from: at
            .filter(|&t| t != p.peak_ts_ns.max(0) as u64)
            .map(|t| fmt::duration(t as i64)),
        at,
    })
}

fn peak_dims(p: &Peak) -> Vec<DimView> {
    let total = p.peak_bytes.max(1);
    let dim = |title: &'static str,
               groups: &[crate::store::query::Group],
               key_of: &dyn Fn(&crate::store::query::PeakAlloc) -> String,
               label: &dyn Fn(&str) -> String| {
        let mut lists: HashMap<String, Vec<&crate::store::query::PeakAlloc>> = HashMap::new();
        for a in &p.largest {
            lists.entry(key_of(a)).or_default().push(a);
        }
        DimView {
            title,
            groups: groups
                .iter()
                .map(|g| {
                    let list = lists.get(&g.key).map(Vec::as_slice).unwrap_or(&[]);
                    let shown = list.len().min(PER_GROUP);
                    GroupView {
                        key: label(&g.key),
                        bytes: fmt::bytes(g.bytes as i64),
                        count: g.count,
                        pct: fmt::percent(g.bytes as i64, total),
                        pct_int: (g.bytes as i64).saturating_mul(100) / total,
                        allocs: list[..shown]
                            .iter()
                            .map(|a| AllocView {
                                size: fmt::bytes(a.size as i64),
                                ptr: format!("{:#x}", a.ptr),
                                at: fmt::duration(a.ts_ns as i64),
                                api: a.api.to_string(),
                                thread: format!("pid {} tid {}", a.pid, a.tid),
                                note: a.annotation.clone().unwrap_or_default(),
                            })
                            .collect(),
                        more: g.count.saturating_sub(shown as u64),
                    }
                })
                .collect(),
        }
    };
    let same = |k: &str| k.to_string();
    vec![
        dim(
            "size class",
            &p.by_size_class,
            &|a| size_class_key(a.size),
            &size_class_label,
        ),
        dim(
            "memory kind",
            &p.by_kind,
            &|a| a.mem_kind.to_string(),
            &same,
        ),
        dim(
            "thread",
            &p.by_thread,
            &|a| format!("pid {} tid {}", a.pid, a.tid),
            &same,
        ),
        dim(
            "annotation",
            &p.by_annotation,
            &|a| a.annotation.clone().unwrap_or_else(|| "(none)".into()),
            &same,
        ),
    ]
}

/// One device's chart as `/chart.svg` and the exports serve it: `device` (default 0) over
/// the query's range `(from, to)`, with its failures marked.
struct RangeChart {
    device: i64,
    from: u64,
    to: u64,
    chart: chart::Rendered,
}

async fn range_chart(st: &AppState, id: i64, q: &RangeQ) -> Result<RangeChart, WebError> {
    let run = load_run(st, id).await?;
    let (from, to) = range(q, run_end(&run))?;
    let device = q.device.unwrap_or(0);
    let incidents = st.store.incidents(Some(id), 10_000).await?;
    let fails = failure_times(&incidents, device, run.t0);
    let chart = device_chart(st, &run, device, from, to, &fails).await?;
    Ok(RangeChart {
        device,
        from,
        to,
        chart,
    })
}

pub async fn export_svg(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<RangeQ>,
) -> Result<Response, WebError> {
    let RangeChart {
        device, chart: c, ..
    } = range_chart(&st, id, &q).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"memwatch-run{id}-gpu{device}.svg\""),
            ),
        ],
        c.svg,
    )
        .into_response())
}

pub async fn export_png(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<RangeQ>,
) -> Result<Response, WebError> {
    let RangeChart {
        device, chart: c, ..
    } = range_chart(&st, id, &q).await?;
    super::png_response(&c.svg, &format!("memwatch-run{id}-gpu{device}"))
}

pub async fn export_jsonl(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<DeviceQ>,
) -> Result<Response, WebError> {
    let run = load_run(&st, id).await?;
    let device = q.device.unwrap_or(0);
    let lines = export::JsonLines::new(st.store.clone(), id, device, run.t0.max(0) as u64);
    let body = stream::unfold(lines, |mut l| async move {
        match l.next_chunk().await {
            Ok(Some(s)) => Some((Ok::<_, std::io::Error>(s), l)),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), l)),
        }
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"memwatch-run{id}-gpu{device}.jsonl\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

pub async fn export_perfetto(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
) -> Result<Response, WebError> {
    let doc = export::perfetto(&st.store, id)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("There is no run #{id}.")))?;
    Ok((
        [(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"memwatch-run{id}.perfetto.json\""),
        )],
        Json(doc),
    )
        .into_response())
}

#[derive(Deserialize)]
pub struct CompareQ {
    a: Option<i64>,
    b: Option<i64>,
    da: Option<i64>,
    db: Option<i64>,
    /// `start` (default) or `marker:NAME`: align both timelines at that annotation.
    align: Option<String>,
}

pub async fn compare(
    State(st): State<AppState>,
    PageQuery(q): PageQuery<CompareQ>,
) -> Result<Response, WebError> {
    let runs = st.store.runs(500).await?;
    let a = q.a.or(runs.get(1).map(|r| r.id));
    let b = q.b.or(runs.first().map(|r| r.id));
    let choices: Vec<Choice> = runs
        .iter()
        .map(|r| Choice {
            id: r.id,
            label: format!("#{} {} ({})", r.id, r.run_key, r.node),
            sel_a: Some(r.id) == a,
            sel_b: Some(r.id) == b,
        })
        .collect();
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
        align: q.align.clone().unwrap_or_else(|| "start".into()),
        align_label: "at their start".into(),
    };
    let marker = match q.align.as_deref() {
        None | Some("") | Some("start") => None,
        Some(m) => match m.strip_prefix("marker:") {
            Some(name) if !name.is_empty() => Some(name.to_string()),
            _ => {
                return Err(WebError::Bad(format!(
                    "align={m:?}: use align=start or align=marker:NAME (an annotation's exact text)"
                )))
            }
        },
    };
    let (Some(a), Some(b)) = (a, b) else {
        return html(&page);
    };
    let (Some(ra), Some(rb)) = (
        data::run_lite(&st.store, a).await?,
        data::run_lite(&st.store, b).await?,
    ) else {
        page.message = format!("Run #{a} or #{b} does not exist.");
        return html(&page);
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
    let shift = |p: &[crate::store::query::Point], by: u64| -> Vec<crate::store::query::Point> {
        p.iter()
            .map(|x| crate::store::query::Point {
                t_ns: x.t_ns + by,
                ..*x
            })
            .collect()
    };
    let (pa_pts, pb_pts) = (shift(&ta.points, sa), shift(&tb.points, sb));
    page.a_label = format!("#{} {} GPU {da}", a, ra.run_key);
    page.b_label = format!("#{} {} GPU {db}", b, rb.run_key);
    let series = [
        Series {
            label: format!("A: {}", page.a_label),
            points: &pa_pts,
            bucket_ns: ta.bucket_ns,
            color: PALETTE[0],
        },
        Series {
            label: format!("B: {}", page.b_label),
            points: &pb_pts,
            bucket_ns: tb.bucket_ns,
            color: PALETTE[1],
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
        .map_err(WebError::Internal)?
        .svg;
    let pa = st.store.live_at(a, da, None, 0).await?;
    let pb = st.store.live_at(b, db, None, 0).await?;
    let peak_of = |p: &Option<Peak>| p.as_ref().map_or(0, |p| p.peak_bytes);
    page.a_peak = fmt::bytes(peak_of(&pa));
    page.b_peak = fmt::bytes(peak_of(&pb));
    page.peak_delta = fmt::delta_bytes(peak_of(&pb) - peak_of(&pa));
    type Pick = fn(&Peak) -> &Vec<crate::store::query::Group>;
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
        for (k, (x, y)) in v.into_iter().take(30) {
            page.rows.push(CompareRow {
                header: false,
                key: if sized { size_class_label(&k) } else { k },
                a: fmt::bytes(x),
                b: fmt::bytes(y),
                delta: fmt::delta_bytes(y - x),
                cls: if y > x {
                    "up"
                } else if y < x {
                    "down"
                } else {
                    ""
                },
            });
        }
    }
    html(&page)
}

pub async fn incidents(State(st): State<AppState>) -> Result<Response, WebError> {
    let rows = st.store.incidents(None, 1000).await?;
    let t0: HashMap<i64, i64> = st
        .store
        .runs(10_000)
        .await?
        .iter()
        .map(|r| (r.id, r.t0_mono_ns))
        .collect();
    let logs = st
        .store
        .incident_logs()
        .await?
        .into_iter()
        .map(|l| {
            (
                l.id,
                l.source,
                l.run_id,
                l.dump_id.is_some(),
                fmt::wall(l.created_unix_ns),
            )
        })
        .collect();
    html(&IncidentsPage {
        logs,
        rows: rows
            .iter()
            .map(|i| incident_view(i, t0.get(&i.run_id).copied().unwrap_or(0)))
            .collect(),
    })
}
