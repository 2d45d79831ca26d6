//! The framework view: what lives inside the framework's pool (JAX/XLA through the PJRT
//! records, PyTorch through a snapshot's blocks), per device over time. `build` sweeps the
//! stored records into rollups (`rollup`, series numbered in `series`), `builder` keeps
//! them current in the background, `read` reads them at any zoom, `growth` (the doctor's
//! rules: kept step outputs, raw driver memory) finds what keeps accumulating, `live_at` says what was live at an instant, `view` draws the run page's section; `GET
//! /api/runs/{id}/framework` answers the same as JSON.

mod build;
mod builder;
mod growth;
mod live_at;
mod read;
mod reconcile;
mod rollup;
mod series;
mod view;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use memwatch_analysis::doctor::facts::PjrtFacts;
use memwatch_analysis::doctor::steps::{self, ExecutionLeak};

use crate::app::error::AppError;
use crate::app::extract::{Path, Query};
use crate::app::state::AppState;
use crate::runs::{load_run, range, run_end, RangeQ};

pub use build::{build_run, Built};
pub use builder::{spawn_framework_builder, stale_runs, BuilderProgress};
pub use growth::{ExecutableGrowth, Growing};
pub(crate) use live_at::{live_buffers_at, LiveAt};
pub use read::FrameworkTimeline;
pub(crate) use view::{growing_label, sections, FrameworkSection};

/// Whether the run keeps accumulating framework memory on any device (the overview's
/// badge): the first device that does, read from the rollups built so far.
pub(crate) async fn run_growing(
    store: &crate::db::Store,
    run: i64,
    devices: &[i64],
    end: u64,
) -> Result<Option<Growing>, crate::db::StoreError> {
    let mut framework = false;
    for &d in devices {
        if let Some(tl) = read::read(store, run, d, 0, end, growth::GROWTH_POINTS).await? {
            framework = true;
            let leaks = step_leaks(store, run, d, end).await?;
            if let Some(g) = growth::growing(&tl, &leaks) {
                return Ok(Some(g));
            }
        }
    }
    if framework {
        return Ok(None);
    }
    // No framework records: the devices' raw live bytes, by the same rule.
    for &d in devices.iter().filter(|&&d| d >= 0) {
        if let Some(g) = driver_growing(store, run, d, end).await? {
            return Ok(Some(g));
        }
    }
    Ok(None)
}

/// The device's first out-of-memory failure (monotonic ns as stored, pid): where the doctor's
/// failure begins (refusals of another kind, e.g. a `cuMemCreate` not permitted, are
/// not it).
async fn first_oom(
    store: &crate::db::Store,
    run: i64,
    device: i64,
) -> Result<Option<(i64, i64)>, crate::db::StoreError> {
    let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT api, result, ts_ns, pid FROM incidents i WHERE run_id = $1 AND device = $2 \
         AND ts_ns = (SELECT MIN(ts_ns) FROM incidents j WHERE j.run_id = i.run_id \
         AND j.device = i.device AND j.api = i.api AND j.result = i.result)",
    )
    .bind(run)
    .bind(device)
    .fetch_all(&store.pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|(api, result, _, _)| crate::codes::is_oom(api, *result))
        .map(|r| (r.2, r.3))
        .min())
}

/// Stored monotonic ns `ts` of run `run` as ns after its start.
async fn since_start(
    store: &crate::db::Store,
    run: i64,
    ts: i64,
) -> Result<u64, crate::db::StoreError> {
    let t0 = store.run_t0(run).await?.unwrap_or(0) as i64;
    Ok((ts - t0).max(0) as u64)
}

/// Where `memwatch diagnose` looks for growth of driver memory on `device`: at its first
/// out-of-memory failure ([`first_oom`]), else at the run's end (`end`); ns after the
/// run's start.
async fn checkpoint(
    store: &crate::db::Store,
    run: i64,
    device: i64,
    end: u64,
) -> Result<u64, crate::db::StoreError> {
    match first_oom(store, run, device).await? {
        Some((t, _)) => since_start(store, run, t).await,
        None => Ok(end),
    }
}

/// Whether a device's raw driver memory grew by the doctor's rule
/// ([`growth::driver_growing`]), checked where `memwatch diagnose` checks it
/// ([`checkpoint`]).
pub(crate) async fn driver_growing(
    store: &crate::db::Store,
    run: i64,
    device: i64,
    end: u64,
) -> Result<Option<Growing>, crate::db::StoreError> {
    let at = checkpoint(store, run, device, end).await?;
    let Some((live, as_of, _)) = store.live_allocs_at(run, device, at).await? else {
        return Ok(None);
    };
    Ok(growth::driver_growing(&live, as_of.max(0) as u64))
}

/// Where `memwatch diagnose` looks for kept step outputs on `device`: at its first
/// out-of-memory failure (a leak); in a run that did not fail, at the allocator's highest in-use sample,
/// else (the platform allocator keeps no statistics) at the device's driver peak (a
/// limit the allocator ignored); else at the run's end. ns after the run's start, and the
/// failing process (the one the doctor examines) when there is a failure.
async fn step_checkpoint(
    store: &crate::db::Store,
    run: i64,
    device: i64,
    end: u64,
) -> Result<(u64, Option<u32>), crate::db::StoreError> {
    if let Some((t, pid)) = first_oom(store, run, device).await? {
        return Ok((since_start(store, run, t).await?, Some(pid as u32)));
    }
    let mut at: Option<i64> = sqlx::query_scalar(
        "SELECT ts_ns FROM pjrt_memory_stats WHERE run_id = $1 AND device = $2 \
             ORDER BY bytes_in_use DESC, ts_ns LIMIT 1",
    )
    .bind(run)
    .bind(device)
    .fetch_optional(&store.pool)
    .await?;
    if at.is_none() {
        at = sqlx::query_scalar(
            "SELECT peak_ts_ns FROM run_devices WHERE run_id = $1 AND device = $2 \
             AND peak_bytes > 0",
        )
        .bind(run)
        .bind(device)
        .fetch_optional(&store.pool)
        .await?;
    }
    match at {
        Some(t) => Ok((since_start(store, run, t).await?, None)),
        None => Ok((end, None)),
    }
}

/// The executables of `device` whose step outputs stay live, by the doctor's rule
/// (`steps::execution_leaks`, every process on the device) on the PJRT rows it reads,
/// where `memwatch diagnose` looks ([`step_checkpoint`]), and whose steps go on until
/// then (`ExecutionLeak::reaches`: weights made once in a loop are not growth).
pub(crate) async fn step_leaks(
    store: &crate::db::Store,
    run: i64,
    device: i64,
    end: u64,
) -> Result<Vec<ExecutionLeak>, crate::db::StoreError> {
    let (at, failed) = step_checkpoint(store, run, device, end).await?;
    let Some(cap) = crate::runtime::live_steps_at(store, run, device, at).await? else {
        return Ok(Vec::new());
    };
    let facts = PjrtFacts::lifetimes(&cap);
    let mut pids: Vec<u32> = facts
        .buffers
        .iter()
        .map(|b| b.pid)
        .filter(|&p| failed.is_none_or(|f| f == p))
        .collect();
    pids.sort_unstable();
    pids.dedup();
    Ok(pids
        .into_iter()
        .flat_map(|pid| steps::execution_leaks(&facts, pid, device as i32, at))
        .filter(|l| l.reaches(at))
        .collect())
}

/// One device's framework memory over a whole run, for comparing runs: the main series
/// (PyTorch allocated, else all live PJRT buffers), its peak and last value, and each
/// producer's peak.
pub(crate) struct FrameworkSummary {
    /// "allocated" (PyTorch) or "live buffers" (PJRT).
    pub what: &'static str,
    pub points: Vec<crate::render::Point>,
    pub bucket_ns: u64,
    pub peak: i64,
    pub at_end: i64,
    pub producers: Vec<(String, i64)>,
}

/// The framework summary of `device` over `[0, end)` in about `points` buckets; `None`
/// when the run has no framework records there. Builds the view if it never was.
pub(crate) async fn summary(
    store: &crate::db::Store,
    run: i64,
    device: i64,
    end: u64,
    points: usize,
) -> Result<Option<FrameworkSummary>, crate::db::StoreError> {
    read::ensure_built(store, run).await?;
    let Some(tl) = read::read(store, run, device, 0, end, points).await? else {
        return Ok(None);
    };
    let (what, s) = if tl.is_torch() {
        ("allocated", series::TORCH_ALLOCATED)
    } else {
        ("live buffers", series::LIVE_BUFFERS)
    };
    let Some(pts) = tl.get(s) else {
        return Ok(None);
    };
    let producers = tl
        .series
        .iter()
        .filter_map(|(&k, p)| {
            let i = series::producer_of_live(k)?;
            let name = tl.producers.get(i as usize)?.clone();
            Some((name, p.iter().map(|x| x.max).max().unwrap_or(0)))
        })
        .collect();
    Ok(Some(FrameworkSummary {
        what,
        peak: pts.iter().map(|x| x.max).max().unwrap_or(0),
        at_end: pts.last().map_or(0, |x| x.last),
        points: pts.to_vec(),
        bucket_ns: tl.bucket_ns,
        producers,
    }))
}

#[derive(Deserialize, Default)]
struct ApiQ {
    device: Option<i64>,
    from: Option<u64>,
    to: Option<u64>,
    points: Option<usize>,
}

/// `GET /api/runs/{id}/framework?device=&from=&to=&points=`: the framework series of a
/// device (series numbers as in `framework_rollups`), its producers, growth per executable
/// over the whole run, and whether the run keeps accumulating.
async fn api(
    State(st): State<AppState>,
    Path(id): Path<i64>,
    Query(q): Query<ApiQ>,
) -> Result<Json<serde_json::Value>, AppError> {
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
    let device = q
        .device
        .or_else(|| run.devices.iter().find(|d| d.device >= 0).map(|d| d.device))
        .unwrap_or(0);
    read::ensure_built(&st.store, id).await?;
    let points = q.points.unwrap_or(1100).clamp(1, 100_000);
    let tl = read::read(&st.store, id, device, from, to, points).await?;
    let whole = read::read(&st.store, id, device, 0, end, growth::GROWTH_POINTS).await?;
    let leaks = match &whole {
        Some(_) => step_leaks(&st.store, id, device, end).await?,
        None => Vec::new(),
    };
    // Without framework records, the device's raw driver memory by the doctor's rule.
    let growing = match &whole {
        Some(w) => growth::growing(w, &leaks),
        None => driver_growing(&st.store, id, device, end).await?,
    };
    Ok(Json(serde_json::json!({
        "run": id,
        "device": device,
        "framework": tl.as_ref().map(|t| if t.is_torch() { "pytorch" } else { "pjrt" }),
        "timeline": tl,
        "growth": whole
            .as_ref()
            .map(|w| growth::per_executable(w, &leaks))
            .unwrap_or_default(),
        "growing": growing,
    })))
}

/// The framework feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/runs/{id}/framework", get(api))
        .route("/runs/{id}/framework/{part}", get(view::part_svg))
}
