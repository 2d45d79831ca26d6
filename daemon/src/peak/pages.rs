//! The Peak page: a device's live allocations at its peak (with the PJRT runtime panel)
//! or at any instant (`at`), grouped by size class, memory kind, thread and annotation,
//! each group expandable to its largest allocations. `?format=json` gives the data.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::model::{Group, Peak, PeakAlloc};
use super::views::{AllocView, DimView, GroupView, PeakPage};
use super::views::{FailedView, FrameworkLiveView};
use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::page::html;
use crate::app::state::AppState;
use crate::incidents::{is_oom, verdict_view};
use crate::render::fmt;
use crate::runs::{device_label, load_run, run_end, RunLite};

#[derive(Deserialize)]
pub(crate) struct DeviceQ {
    pub device: Option<i64>,
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

pub(crate) fn size_class_label(key: &str) -> String {
    key.strip_prefix("<= ")
        .and_then(|k| k.strip_suffix(" B"))
        .and_then(|k| k.parse::<i64>().ok())
        .map_or_else(|| key.to_string(), |b| format!("≤ {}", fmt::bytes(b)))
}

pub(super) async fn peak(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<DeviceQ>,
) -> Result<Response, AppError> {
    let run = load_run(&st, id).await?;
    let devices: Vec<(i64, String)> = run
        .devices
        .iter()
        .filter(|d| d.shown())
        .map(|d| (d.device, d.label()))
        .collect();
    let device = q
        .device
        .or(devices.iter().map(|d| d.0).find(|d| *d >= 0))
        .or(devices.first().map(|d| d.0))
        .unwrap_or(0);
    let json = match q.format.as_deref() {
        None | Some("html") => false,
        Some("json") => true,
        Some(f) => {
            return Err(AppError::bad(format!(
                "unknown format {f:?} (use format=json)"
            )))
        }
    };
    let at = q.at.map(|t| t.min(run_end(&run)));
    // The PJRT attribution is about the runtime peak: shown on the peak view, not at an instant.
    let runtime = match at {
        None => crate::runtime::panel(&st.store, id, device).await?,
        Some(_) => None,
    };
    let failed = failed_request(&st, &run, device, at).await?;
    let framework_live = match at {
        Some(t) => {
            crate::framework::live_buffers_at(&st.store, id, device, run.t0 + t as i64).await?
        }
        None => Vec::new(),
    };
    let framework_total = fmt::bytes(framework_live.iter().map(|g| g.bytes).sum());
    let held_before = crate::runs::pre_attach(&st.store, id)
        .await?
        .get(&device)
        .map(crate::runs::pre_attach_line)
        .unwrap_or_default();
    let p = st.store.live_at(id, device, at, PEAK_LIST).await?;
    if json {
        return Ok(Json(serde_json::json!({
            "run_id": id,
            "device": device,
            "at_ns": at,
            "live": p,
            "framework_live": framework_live,
        }))
        .into_response());
    }
    let framework_live: Vec<FrameworkLiveView> =
        framework_live.iter().map(FrameworkLiveView::of).collect();
    let Some(p) = p else {
        return html(&PeakPage {
            id,
            device,
            devices,
            missing: true,
            held_before,
            peak: String::new(),
            peak_at: String::new(),
            zoom_from: 0,
            zoom_to: 0,
            live_allocations: 0,
            shown: 0,
            dims: Vec::new(),
            runtime,
            at,
            framework_live,
            framework_total,
            moved_from: None,
            failed,
            device_label: device_label(device),
        });
    };
    let t = p.peak_ts_ns.max(0) as u64;
    let pad = 50_000_000u64.max(t / 20);
    html(&PeakPage {
        id,
        device,
        devices,
        missing: false,
        held_before,
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
        framework_live,
        framework_total,
        failed,
        device_label: device_label(device),
    })
}

/// The first out-of-memory failure on `device` (an incident), with the run's stored
/// verdict when it names this device: what the Peak page of an OOM run leads with.
async fn failed_request(
    st: &AppState,
    run: &RunLite,
    device: i64,
    shown: Option<u64>,
) -> Result<Option<FailedView>, AppError> {
    let incidents = st.store.incidents(Some(run.id), 10_000).await?;
    let Some(first) = incidents
        .iter()
        .filter(|i| i.device == device && is_oom(i))
        .min_by_key(|i| i.ts_ns)
    else {
        return Ok(None);
    };
    let at = (first.ts_ns - run.t0).max(0);
    let verdict = st
        .store
        .diagnosis(run.id)
        .await?
        .as_ref()
        .and_then(verdict_view)
        .filter(|v| v.failure);
    Ok(Some(FailedView {
        what: match &first.executable {
            Some(x) => format!("{x} ({})", first.api),
            None => first.api.clone(),
        },
        error: first.error.clone(),
        requested: fmt::bytes(first.size),
        live_then: fmt::bytes(first.live_bytes),
        at: fmt::duration(at),
        at_ns: at.max(0) as u64,
        shown_now: shown == Some(at.max(0) as u64),
        pid: first.pid,
        more: incidents
            .iter()
            .filter(|i| i.device == device && is_oom(i))
            .count()
            - 1,
        verdict_kind: verdict
            .as_ref()
            .map_or_else(String::new, |v| v.kind.clone()),
        verdict_headline: verdict.map_or_else(String::new, |v| v.headline),
    }))
}

fn peak_dims(p: &Peak) -> Vec<DimView> {
    let total = p.peak_bytes.max(1);
    let dim = |title: &'static str,
               groups: &[Group],
               key_of: &dyn Fn(&PeakAlloc) -> String,
               label: &dyn Fn(&str) -> String| {
        let mut lists: HashMap<String, Vec<&PeakAlloc>> = HashMap::new();
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
