//! The XLA pages: the stored dumps' modules (`/xla`, with the legacy `xla_modules`
//! rows) and one module (`/xla/modules/{id}`: composition at peak, top buffers, the diff
//! against another module by `memwatch_analysis::xla::diff_reports`). `?format=json`
//! gives the data, `?format=png` a chart.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use memwatch_analysis::xla::{diff::diff_reports, ModuleReport, PeakBuffer};
use serde::Deserialize;

use super::views::{XlaListPage, XlaModulePage, XlaModuleView};
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::{html, png_of, wants_json, wants_png};
use crate::app::state::AppState;
use crate::db::Store;
use crate::render::fmt::{self, bytes_exact as exact, bytes_u64 as b};
use crate::render::page_charts::{self, PAGE_CHART_W as W};
use crate::render::{Cells, Fact};

fn report_of(json: &str, what: &str) -> Result<ModuleReport, AppError> {
    serde_json::from_str(json).map_err(|e| {
        AppError::internal(format!(
            "stored report of {what} cannot be read ({e}); re-import the dump"
        ))
    })
}

/// The module reports of stored dump `dump`, in id order.
pub(crate) async fn dump_reports(store: &Store, dump: i64) -> Result<Vec<ModuleReport>, AppError> {
    store
        .dump_report_texts(dump)
        .await?
        .iter()
        .map(|j| report_of(j, &format!("dump #{dump}")))
        .collect()
}

pub(crate) fn buffer_row(p: &PeakBuffer, kind: bool) -> Cells {
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

/// `/xla`: the stored dumps' modules (and any legacy `xla_modules` rows).
pub(super) async fn xla_list(
    State(st): State<AppState>,
    Query(q): Query<XlaListQ>,
) -> Result<Response, AppError> {
    let json = wants_json(q.format.as_deref())?;
    let rows = st.store.dump_modules(q.dump).await?;
    if json {
        return Ok(Json(serde_json::json!({ "modules": rows })).into_response());
    }
    let legacy = st
        .store
        .legacy_xla_modules(None)
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
pub(super) struct XlaListQ {
    format: Option<String>,
    dump: Option<i64>,
}

/// `format=json|png`, which chart `format=png` draws (`kind`, `category`, `op`), and
/// another module to diff with.
#[derive(Deserialize, Default)]
pub(super) struct ModuleQ {
    format: Option<String>,
    diff: Option<i64>,
    chart: Option<String>,
}

fn group_bars(groups: &[memwatch_analysis::xla::report::Group], n: usize) -> Vec<(String, u64)> {
    groups
        .iter()
        .take(n)
        .map(|g| (format!("{} ({})", g.key, g.count), g.bytes))
        .collect()
}

/// `/xla/modules/{id}[?diff=OTHER]`: composition at peak, top buffers, diff.
pub(super) async fn xla_module(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<ModuleQ>,
) -> Result<Response, AppError> {
    let json = wants_json(q.format.as_deref())?;
    let (row, rj) = st.store.dump_module(id).await?.ok_or_else(|| {
        AppError::not_found(format!(
            "There is no stored XLA module #{id}. See /xla for the stored ones."
        ))
    })?;
    let rep = report_of(&rj, &row.name)?;
    let base = match q.diff {
        Some(o) => {
            let (orow, oj) = st.store.dump_module(o).await?.ok_or_else(|| {
                AppError::not_found(format!("There is no stored XLA module #{o} to diff with."))
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
            page_charts::bars(W / 2, &rows, color).map_err(AppError::internal)
        } else {
            Ok(String::new())
        }
    };
    let kind_svg = bars(group_bars(&rep.by_allocation_kind, 10), true)?;
    let category_svg = bars(group_bars(&rep.by_category, 12), false)?;
    let op_svg = if has_peak && !rep.by_op_name.is_empty() {
        page_charts::bars(W, &group_bars(&rep.by_op_name, 15), false).map_err(AppError::internal)?
    } else {
        String::new()
    };
    if wants_png(q.format.as_deref()) {
        let charts = [
            ("kind".to_string(), kind_svg.as_str()),
            ("category".to_string(), category_svg.as_str()),
            ("op".to_string(), op_svg.as_str()),
        ];
        return png_of(q.chart.as_deref(), &charts, &format!("memwatch-xla{id}"));
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
