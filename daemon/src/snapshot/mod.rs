//! Runs stored from a PyTorch memory snapshot (`memwatch import SNAPSHOT.pickle`): what
//! the dump says, beyond the timeline the framework view draws. `dump` reads the
//! segment and stack markers back; `segments` is the allocator's segments page
//! (`/runs/{id}/segments`) and `draw` its drawing; `stack` titles a stack by the user's
//! frame with every frame below; `compare` puts two snapshots' dumps side by side on
//! the Compare page; [`run_facts`] gives the run page what the snapshot names (its
//! devices, no machine).

mod compare;
mod draw;
mod dump;
mod segments;
mod stack;

use axum::routing::get;
use axum::Router;

use crate::app::error::AppError;
use crate::app::state::AppState;
use crate::runs::RunLite;

pub(crate) use compare::{compare_dumps, DumpCompare};
pub(crate) use dump::stacks_of_sites;
pub(crate) use segments::DeviceTotals;
pub(crate) use stack::StackView;

/// The snapshot feature's routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/runs/{id}/segments", get(segments::page))
}

/// A run's title as the run list gives it.
pub(crate) async fn run_title(st: &AppState, run: &RunLite) -> Result<String, AppError> {
    let ids = st
        .store
        .identities(&[(
            run.id,
            run.run_key.clone(),
            run.node.clone(),
            run.wall_anchor_unix_ns,
            run.created_unix_ns,
        )])
        .await?;
    Ok(ids
        .get(&run.id)
        .map_or_else(|| run.run_key.clone(), |i| i.title.clone()))
}

/// One device a snapshot names, with its segments at the dump.
pub(crate) struct SnapshotDevice {
    pub device: i32,
    /// The device's memory size: a snapshot does not record it.
    pub total: &'static str,
    /// Its segments' sums (none stored: `None`).
    pub totals: Option<DeviceTotals>,
}

/// What the run page says of a snapshot run instead of a machine's facts.
pub(crate) struct SnapshotFacts {
    /// The machine the import named (`memwatch import --node`), else empty: a snapshot
    /// file does not say where it was taken.
    pub host: String,
    pub devices: Vec<SnapshotDevice>,
}

/// Where a snapshot run was taken: `None` when `run` is no snapshot run, else the
/// machine the import named (`memwatch import --node`), empty when it named none (a
/// snapshot file does not say). The node an import is stored under is not that machine.
pub(crate) async fn taken_on(
    store: &crate::db::Store,
    run: i64,
) -> Result<Option<String>, crate::db::StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT hostname FROM processes WHERE run_id = $1 AND argv LIKE $2 ORDER BY pid LIMIT 1",
    )
    .bind(run)
    .bind(crate::codes::snapshot_argv_pattern())
    .fetch_optional(&store.pool)
    .await?)
}

/// The machine a run list names for run `run` stored under `node`: the node, but for a
/// snapshot run where it was taken, "not recorded (snapshot)" when the import named none.
pub(crate) async fn machine_of(
    store: &crate::db::Store,
    run: i64,
    node: &str,
) -> Result<String, crate::db::StoreError> {
    Ok(match taken_on(store, run).await? {
        Some(host) if host.is_empty() => "not recorded (snapshot)".to_string(),
        Some(host) => host,
        None => node.to_string(),
    })
}

/// [`SnapshotFacts`] of `run`, or `None` when it is no snapshot run.
pub(crate) async fn run_facts(
    st: &AppState,
    run: &RunLite,
) -> Result<Option<SnapshotFacts>, AppError> {
    let Some(host) = taken_on(&st.store, run.id).await? else {
        return Ok(None);
    };
    let d = dump::load(&st.store, run.id).await?;
    let mut devices: Vec<i32> = run
        .devices
        .iter()
        .filter(|x| x.device >= 0)
        .map(|x| x.device as i32)
        .chain(d.devices.keys().copied())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    Ok(Some(SnapshotFacts {
        host,
        devices: devices
            .into_iter()
            .map(|dev| {
                let segs = d.segments(dev);
                let (reserved, bytes) = d.totals(dev);
                SnapshotDevice {
                    device: dev,
                    total: "not recorded in the snapshot",
                    totals: (!segs.is_empty()).then(|| DeviceTotals::of(segs, reserved, bytes)),
                }
            })
            .collect(),
    }))
}
