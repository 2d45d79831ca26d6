//! Handlers of the Incident (OOM diagnosis of an attached log), XLA module list, XLA
//! module and Gate history pages. The diagnosis and the dump analysis are
//! `memwatch_analysis`'s (`log::parse_log` + `log::diagnose::diagnose`,
//! `xla::diff_reports`), run on what `memwatch import --log/--xla-dump` stored; this
//! module only turns their results into page models. `?format=json` gives the data.

use std::collections::BTreeMap;

use crate::extract::{PagePath, PageQuery};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memwatch_analysis::log::{self, diagnose, BfcOom, LogReport};
use memwatch_analysis::xla::{diff::diff_reports, ModuleReport, PeakBuffer};
use serde::Deserialize;

use super::dash_charts::{self, GatePoint, MapChunk};
use super::dash_views::*;
use super::{data, fmt, html, WebError};
use crate::api::AppState;

/// Width of the page charts (they scale to the page).
const W: u32 = 1100;

#[derive(Deserialize, Default)]
pub struct FormatQ {
    format: Option<String>,
    diff: Option<i64>,
    /// With `format=png`: which chart of the page (`oom-1`, `kind`, `category`, `op`,
    /// a gate entry's number); the page's first chart when left out.
    chart: Option<String>,
}

fn wants_json(q: &FormatQ) -> Result<bool, WebError> {
    match q.format.as_deref() {
        None | Some("html") | Some("png") => Ok(false),
        Some("json") => Ok(true),
        Some(f) => Err(WebError::Bad(format!(
            "unknown format {f:?} (use format=json, format=png or leave it out)"
        ))),
    }
}

fn wants_png(q: &FormatQ) -> bool {
    q.format.as_deref() == Some("png")
}

/// The PNG of one of a page's charts: `charts` are (key, svg); `file` names the download.
fn png_of(q: &FormatQ, charts: &[(String, &str)], file: &str) -> Result<Response, WebError> {
    let pick = match &q.chart {
        Some(k) => charts.iter().find(|(key, _)| key == k),
        None => charts.iter().find(|(_, svg)| !svg.is_empty()),
    };
    match pick {
        Some((key, svg)) if !svg.is_empty() => super::png_response(svg, &format!("{file}-{key}")),
        _ => Err(WebError::NotFound(format!(
            "this page has no chart {:?} (charts: {})",
            q.chart.as_deref().unwrap_or("(first)"),
            charts
                .iter()
                .filter(|(_, s)| !s.is_empty())
                .map(|(k, _)| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn report_of(json: &str, what: &str) -> Result<ModuleReport, WebError> {
    serde_json::from_str(json).map_err(|e| {
        WebError::Internal(format!(
            "stored report of {what} cannot be read ({e}); re-import the dump"
        ))
    })
}

async fn dump_reports(st: &AppState, dump: i64) -> Result<Vec<ModuleReport>, WebError> {
    st.store
        .dump_reports(dump)
        .await?
        .iter()
        .map(|j| report_of(j, &format!("dump #{dump}")))
        .collect()
}

fn b(v: u64) -> String {
    fmt::bytes(v.min(i64::MAX as u64) as i64)
}

fn exact(v: u64) -> String {
    format!("{} ({v} B)", b(v))
}

/// `/incidents/logs/{id}`: the `memwatch log --xla-dump` diagnosis of a stored log.
pub async fn incident_log(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<FormatQ>,
) -> Result<Response, WebError> {
    let json = wants_json(&q)?;
    let (row, text) = st.store.incident_log(id).await?.ok_or_else(|| {
        WebError::NotFound(format!(
            "There is no stored log #{id}. Attach one with `memwatch import --db DB --log FILE`."
        ))
    })?;
    let mut report = LogReport::default();
    log::parse_log(
        text.as_bytes(),
        std::path::Path::new(&row.source),
        &mut report,
    )
    .map_err(|e| WebError::Internal(format!("stored log #{id} cannot be parsed: {e}")))?;
    let mods = match row.dump_id {
        Some(d) => dump_reports(&st, d).await?,
        None => Vec::new(),
    };
    let diagnoses = diagnose::diagnose(&report, &mods, row.mem_fraction);
    if json {
        return Ok(Json(serde_json::json!({
            "id": id,
            "source": row.source,
            "run_id": row.run_id,
            "dump_id": row.dump_id,
            "log": report,
            "diagnoses": diagnoses,
        }))
        .into_response());
    }
    let dump_modules = match row.dump_id {
        Some(d) => st
            .store
            .dump_modules(Some(d))
            .await?
            .into_iter()
            .map(|m| (m.id, m.name))
            .collect(),
        None => Vec::new(),
    };
    let mut ooms = Vec::new();
    for (i, (oom, d)) in report.ooms.iter().zip(&diagnoses).enumerate() {
        ooms.push(oom_view(i + 1, oom, d, &report)?);
    }
    if wants_png(&q) {
        let charts: Vec<(String, &str)> = ooms
            .iter()
            .map(|o| (format!("oom-{}", o.n), o.chunk_svg.as_str()))
            .collect();
        return png_of(&q, &charts, &format!("memwatch-incident{id}"));
    }
    html(&IncidentPage {
        id,
        source: row.source,
        run_id: row.run_id,
        dump_id: row.dump_id,
        dump_modules,
        devices: report.devices.clone(),
        lines: report.lines,
        ooms,
        errors: report
            .resource_exhausted
            .iter()
            .map(|e| e.message.clone())
            .collect(),
        remat: report
            .remat_warnings
            .iter()
            .map(|w| {
                format!(
                    "Rematerialization could not reduce memory use below {}: reached {} (from {}), {}:{}.",
                    b(w.target_bytes),
                    b(w.achieved_bytes),
                    b(w.original_bytes),
                    w.at.file,
                    w.at.line
                )
            })
            .collect(),
    })
}

fn buffer_row(p: &PeakBuffer, kind: bool) -> Cells {
    Cells(vec![
        format!(
            "{}{}",
            p.instruction,
            if p.index == "{}" { "" } else { &p.index }
        ),
        if kind {
            p.allocation_kind.clone()
        } else {
            p.category.clone()
        },
        p.shape.clone(),
        p.op_name.clone().unwrap_or_else(|| "-".into()),
        b(p.bytes),
    ])
}

fn oom_view(
    n: usize,
    oom: &BfcOom,
    d: &diagnose::Diagnosis,
    report: &LogReport,
) -> Result<OomView, WebError> {
    let mut failed = vec![
        Fact {
            label: "Requested (BFC-rounded)",
            value: exact(d.requested_bytes),
        },
        Fact {
            label: "Allocator",
            value: oom.allocator.clone(),
        },
    ];
    if let Some(e) = &d.executable {
        failed.push(Fact {
            label: "Executable",
            value: e.clone(),
        });
    }
    let opt = |v: Option<u64>| v.map_or_else(|| "unknown".into(), exact);
    failed.push(Fact {
        label: "Pool",
        value: opt(d.pool_bytes),
    });
    failed.push(Fact {
        label: "In use",
        value: opt(d.in_use_bytes),
    });
    failed.push(Fact {
        label: "Largest free chunk",
        value: opt(d.largest_free_bytes),
    });
    failed.push(Fact {
        label: "Needed (in use + request)",
        value: exact(d.needed_bytes),
    });
    if let Some(s) = d.shortfall_bytes {
        failed.push(Fact {
            label: "Short by",
            value: exact(s),
        });
    }
    let matched = d.matched.as_ref().map_or(String::new(), |m| {
        format!(
            "The failed request is {}'s {} ({} bytes in its buffer assignment, {} after rounding to 256).",
            m.module, m.what, m.bytes, m.rounded_bytes
        )
    });
    let live_rows = d
        .live_by_executable
        .iter()
        .map(|(e, bytes, c)| Cells(vec![e.clone(), b(*bytes), c.to_string()]))
        .collect();
    // The chunk map: offsets from the lowest chunk address, in address order.
    let mut chunks: Vec<&log::Chunk> = oom.chunks.iter().collect();
    chunks.sort_by_key(|c| c.address);
    let base = chunks.first().map_or(0, |c| c.address);
    let map: Vec<MapChunk> = chunks
        .iter()
        .map(|c| MapChunk {
            offset: c.address.saturating_sub(base),
            size: c.size,
            in_use: c.in_use,
            owner: c
                .executable
                .clone()
                .or_else(|| c.annotation.clone())
                .or_else(|| c.op.clone())
                .unwrap_or_else(|| "(unannotated)".into()),
        })
        .collect();
    let mapped_end = map.iter().map(|c| c.offset + c.size).max().unwrap_or(0);
    let pool = d.pool_bytes.unwrap_or(mapped_end).max(mapped_end);
    let (chunk_svg, chunk_note) = if map.is_empty() {
        let note = if oom.in_use_by_size.is_empty() {
            "The log has no chunk dump (older one-line OOM messages), so the pool's layout is unknown.".to_string()
        } else {
            format!(
                "The log lists in-use chunks by size only: {}.",
                oom.in_use_by_size
                    .iter()
                    .map(|(n, s)| format!("{n} × {}", b(*s)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        (String::new(), note)
    } else {
        let free: Vec<u64> = map.iter().filter(|c| !c.in_use).map(|c| c.size).collect();
        let largest = free.iter().copied().max().unwrap_or(0);
        let note = if largest >= d.requested_bytes {
            format!(
                "{} chunks; the largest free chunk ({}) would have held the request, so the failure was not caused by lack of room in this pool region.",
                map.len(),
                b(largest)
            )
        } else if free.iter().sum::<u64>() >= d.requested_bytes {
            format!(
                "Fragmentation: the {} free chunk(s) add up to {}, enough for the request, but the largest is only {}.",
                free.len(),
                b(free.iter().sum()),
                b(largest)
            )
        } else {
            format!(
                "Not fragmentation: all {} free chunk(s) together hold {}, less than the {} requested; the pool is too small for what is live plus the request.",
                free.len(),
                b(free.iter().sum()),
                b(d.requested_bytes)
            )
        };
        let svg = dash_charts::chunk_map(W, pool, &map, d.requested_bytes, largest)
            .map_err(WebError::Internal)?;
        (svg, note)
    };
    let fraction = match (d.suggested_mem_fraction, d.device_memory_bytes) {
        (Some(f), Some(dev)) => format!(
            "With {} of device memory, XLA_CLIENT_MEM_FRACTION={f:.2} leaves room for what was needed plus 5%.",
            b(dev)
        ),
        _ => String::new(),
    };
    let title = format!(
        "{} could not allocate {}{}",
        oom.allocator,
        b(d.requested_bytes),
        d.executable
            .as_deref()
            .map(|e| format!(" while running {e}"))
            .unwrap_or_default()
    );
    let _ = report;
    Ok(OomView {
        n,
        title,
        failed,
        matched,
        live_rows,
        chunk_svg,
        chunk_note,
        peak_rows: d
            .module_peak_buffers
            .iter()
            .take(12)
            .map(|p| buffer_row(p, true))
            .collect(),
        temp_rows: d
            .module_top_temp_values
            .iter()
            .take(12)
            .map(|p| buffer_row(p, false))
            .collect(),
        findings: d.findings.clone(),
        fraction,
    })
}

/// `/xla`: the stored dumps' modules (and any legacy `xla_modules` rows).
pub async fn xla_list(
    State(st): State<AppState>,
    PageQuery(q): PageQuery<XlaListQ>,
) -> Result<Response, WebError> {
    let json = wants_json(&FormatQ {
        format: q.format.clone(),
        diff: None,
        chart: None,
    })?;
    let rows = st.store.dump_modules(q.dump).await?;
    if json {
        return Ok(Json(serde_json::json!({ "modules": rows })).into_response());
    }
    let legacy = data::xla_modules(&st.store, None)
        .await?
        .into_iter()
        .map(|m| {
            Cells(vec![
                m.name,
                "-".into(),
                format!("#{}", m.run_id),
                fmt::bytes(m.argument_bytes),
                fmt::bytes(m.output_bytes),
                fmt::bytes(m.temp_bytes),
                "-".into(),
                fmt::bytes(m.total_allocation_bytes),
            ])
        })
        .collect();
    html(&XlaListPage {
        rows: rows
            .into_iter()
            .map(|m| XlaModuleView {
                id: m.id,
                dump_id: m.dump_id,
                run_id: m.run_id,
                source: m.source,
                name: m.name,
                argument: fmt::bytes(m.argument_bytes),
                output: fmt::bytes(m.output_bytes),
                temp: fmt::bytes(m.temp_bytes),
                peak: m.peak_bytes.map_or("-".into(), fmt::bytes),
                total: fmt::bytes(m.total_allocation_bytes),
            })
            .collect(),
        legacy,
    })
}

#[derive(Deserialize, Default)]
pub struct XlaListQ {
    format: Option<String>,
    dump: Option<i64>,
}

fn group_bars(groups: &[memwatch_analysis::xla::report::Group], n: usize) -> Vec<(String, u64)> {
    groups
        .iter()
        .take(n)
        .map(|g| (format!("{} ({})", g.key, g.count), g.bytes))
        .collect()
}

/// `/xla/modules/{id}[?diff=OTHER]`: composition at peak, top buffers, diff.
pub async fn xla_module(
    State(st): State<AppState>,
    PagePath(id): PagePath<i64>,
    PageQuery(q): PageQuery<FormatQ>,
) -> Result<Response, WebError> {
    let json = wants_json(&q)?;
    let (row, rj) = st.store.dump_module(id).await?.ok_or_else(|| {
        WebError::NotFound(format!(
            "There is no stored XLA module #{id}. See /xla for the stored ones."
        ))
    })?;
    let rep = report_of(&rj, &row.name)?;
    let base = match q.diff {
        Some(o) => {
            let (orow, oj) = st.store.dump_module(o).await?.ok_or_else(|| {
                WebError::NotFound(format!("There is no stored XLA module #{o} to diff with."))
            })?;
            Some((orow, report_of(&oj, &format!("module #{o}"))?))
        }
        None => None,
    };
    let diff = base.as_ref().map(|(_, br)| {
        // Compare as one module: the pages pick the pair, so names need not match.
        let mut br = br.clone();
        br.name = rep.name.clone();
        br.id = rep.id;
        diff_reports(std::slice::from_ref(&br), std::slice::from_ref(&rep))
    });
    if json {
        return Ok(Json(serde_json::json!({
            "id": id,
            "dump_id": row.dump_id,
            "report": rep,
            "diff_with": q.diff,
            "diff": diff,
        }))
        .into_response());
    }
    let mut facts = vec![
        Fact {
            label: "Arguments",
            value: b(rep.argument_bytes),
        },
        Fact {
            label: "Outputs",
            value: b(rep.output_bytes),
        },
        Fact {
            label: "Temporaries",
            value: b(rep.temp_bytes),
        },
        Fact {
            label: "Aliased",
            value: b(rep.alias_bytes),
        },
        Fact {
            label: "Total allocation",
            value: exact(rep.total_allocation_bytes),
        },
    ];
    if let Some(p) = rep.peak_bytes {
        facts.push(Fact {
            label: "Peak (live-range)",
            value: exact(p),
        });
    }
    if let Some(f) = rep.temp_fragmentation_bytes {
        facts.push(Fact {
            label: "Temp never live at once",
            value: b(f),
        });
    }
    let has_peak = !rep.peak_buffers.is_empty();
    let bars = |rows: Vec<(String, u64)>, color: bool| {
        if has_peak && !rows.is_empty() {
            dash_charts::bars(W / 2, &rows, color).map_err(WebError::Internal)
        } else {
            Ok(String::new())
        }
    };
    let kind_svg = bars(group_bars(&rep.by_allocation_kind, 10), true)?;
    let category_svg = bars(group_bars(&rep.by_category, 12), false)?;
    let op_svg = if has_peak && !rep.by_op_name.is_empty() {
        dash_charts::bars(W, &group_bars(&rep.by_op_name, 15), false).map_err(WebError::Internal)?
    } else {
        String::new()
    };
    if wants_png(&q) {
        let charts = [
            ("kind".to_string(), kind_svg.as_str()),
            ("category".to_string(), category_svg.as_str()),
            ("op".to_string(), op_svg.as_str()),
        ];
        return png_of(&q, &charts, &format!("memwatch-xla{id}"));
    }
    let buffers = rep
        .peak_buffers
        .iter()
        .take(25)
        .map(|p| {
            let mut c = buffer_row(p, true).0;
            c.insert(2, p.category.clone());
            c.insert(5, p.source.clone().unwrap_or_else(|| "-".into()));
            Cells(c)
        })
        .collect();
    let temps = rep
        .top_temp_values
        .iter()
        .take(15)
        .map(|p| buffer_row(p, false))
        .collect();
    let others = st
        .store
        .dump_modules(None)
        .await?
        .into_iter()
        .filter(|m| m.id != id)
        .map(|m| {
            (
                m.id,
                format!("#{} {} (dump #{})", m.id, m.name, m.dump_id),
                Some(m.id) == q.diff,
            )
        })
        .collect();
    let mut page = XlaModulePage {
        id,
        name: rep.name.clone(),
        source: row.source,
        dump_id: row.dump_id,
        run_id: row.run_id,
        facts,
        kind_svg,
        category_svg,
        op_svg,
        buffers,
        temps,
        others,
        diff_with: q.diff,
        diff_title: String::new(),
        diff_figures: Vec::new(),
        diff_ops: Vec::new(),
        diff_note: String::new(),
    };
    if let (Some((orow, _)), Some(d)) = (&base, &diff) {
        page.diff_title = format!(
            "Base: module #{} {} (dump #{}); positive changes mean this module needs more.",
            orow.id, orow.name, orow.dump_id
        );
        if let Some(md) = d.modules.first() {
            let names: BTreeMap<&str, &str> = [
                ("argument_bytes", "Arguments"),
                ("output_bytes", "Outputs"),
                ("temp_bytes", "Temporaries"),
                ("alias_bytes", "Aliased"),
                ("total_allocation_bytes", "Total allocation"),
                ("peak_bytes", "Peak"),
            ]
            .into_iter()
            .collect();
            for (k, (x, y, dl)) in &md.figures {
                page.diff_figures.push(Cells(vec![
                    names.get(k.as_str()).unwrap_or(&k.as_str()).to_string(),
                    b(*x),
                    b(*y),
                    fmt::delta_bytes(*dl),
                ]));
            }
            page.diff_ops = md
                .ops
                .iter()
                .take(20)
                .map(|o| {
                    (
                        o.key.clone(),
                        b(o.base_bytes),
                        b(o.new_bytes),
                        fmt::delta_bytes(o.delta_bytes),
                        if o.delta_bytes > 0 {
                            "up"
                        } else if o.delta_bytes < 0 {
                            "down"
                        } else {
                            ""
                        },
                    )
                })
                .collect();
            if page.diff_ops.is_empty() {
                page.diff_note = "No op category's peak bytes changed.".into();
            }
        }
    }
    html(&page)
}

/// `/gates`: per baseline entry, its results over time as a chart and a table.
pub async fn gates(
    State(st): State<AppState>,
    PageQuery(q): PageQuery<FormatQ>,
) -> Result<Response, WebError> {
    let json = wants_json(&q)?;
    let rows = data::gate_results(&st.store).await?;
    let mut by: BTreeMap<String, Vec<data::GateRow>> = BTreeMap::new();
    for r in rows {
        by.entry(r.name.clone()).or_default().push(r);
    }
    if json {
        let v: BTreeMap<&String, Vec<serde_json::Value>> = by
            .iter()
            .map(|(k, rs)| {
                (
                    k,
                    rs.iter()
                        .map(|r| {
                            serde_json::json!({
                                "created_unix_ns": r.created_unix_ns,
                                "run_id": r.run_id,
                                "passed": r.passed,
                                "measured_bytes": r.measured_bytes,
                                "limit_bytes": r.limit_bytes,
                            })
                        })
                        .collect(),
                )
            })
            .collect();
        return Ok(Json(serde_json::json!({ "entries": v })).into_response());
    }
    let mut entries = Vec::new();
    for (i, (name, rs)) in by.into_iter().enumerate() {
        let pts: Vec<GatePoint> = rs
            .iter()
            .map(|r| GatePoint {
                t: r.created_unix_ns,
                measured: r.measured_bytes,
                limit: r.limit_bytes,
                passed: r.passed,
            })
            .collect();
        let fails = rs.iter().filter(|r| !r.passed).count();
        let last = rs.first();
        let summary = format!(
            "{} result(s), {} failed; latest {} ({} of {} limit)",
            rs.len(),
            fails,
            last.map_or("-", |r| if r.passed { "passed" } else { "failed" }),
            last.map_or("-".into(), |r| fmt::bytes(r.measured_bytes)),
            last.map_or("-".into(), |r| fmt::bytes(r.limit_bytes)),
        );
        entries.push(GateEntryView {
            slug: format!("{i}"),
            svg: dash_charts::gate_history(W, &pts).map_err(WebError::Internal)?,
            summary,
            rows: rs
                .iter()
                .take(50)
                .map(|r| GateRowView {
                    when: fmt::wall(r.created_unix_ns),
                    run: r.run_id,
                    passed: r.passed,
                    measured: fmt::bytes(r.measured_bytes),
                    limit: fmt::bytes(r.limit_bytes),
                })
                .collect(),
            name,
        });
    }
    if wants_png(&q) {
        let charts: Vec<(String, &str)> = entries
            .iter()
            .map(|e| (e.slug.clone(), e.svg.as_str()))
            .collect();
        return png_of(&q, &charts, "memwatch-gate");
    }
    html(&GateHistoryPage { entries })
}
