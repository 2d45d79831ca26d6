//! The rows of the records that are not events, one function per record kind: a
//! process's start and end, the dropped-events counter, device samples, markers
//! (annotations). Called by [`Ingestor::commit`](super::Ingestor::commit) inside its
//! transaction, in the batch's order. (Events go to the run state and `write`; PJRT
//! records to `pjrt`; device descriptions to `devices`.)

use memwatch_wire::{DeviceSample, Dropped, Marker, ProcessEnd, ProcessStart};

use super::Tx;
use crate::db::StoreError;

/// The `processes` row of a `process_start` of run `r` (a later start of the pid, after
/// an exec, updates it).
pub(super) async fn process_start(tx: &mut Tx, r: i64, p: &ProcessStart) -> Result<(), StoreError> {
    let argv = serde_json::to_string(&p.argv).unwrap_or_default();
    sqlx::query(
        "INSERT INTO processes (run_id, pid, ppid, mono_anchor_ns, \
         wall_anchor_unix_ns, hostname, shim_version, argv, dropped_events) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0) \
         ON CONFLICT (run_id, pid) DO UPDATE SET ppid = excluded.ppid, \
         mono_anchor_ns = excluded.mono_anchor_ns, \
         wall_anchor_unix_ns = excluded.wall_anchor_unix_ns, \
         hostname = excluded.hostname, shim_version = excluded.shim_version, \
         argv = excluded.argv",
    )
    .bind(r)
    .bind(p.pid as i64)
    .bind(p.ppid as i64)
    .bind(p.mono_anchor_ns as i64)
    .bind(p.wall_anchor_unix_ns as i64)
    .bind(p.hostname.clone())
    .bind(p.shim_version.clone())
    .bind(argv)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A marker of run `r`, stored as an annotation.
pub(super) async fn marker(tx: &mut Tx, r: i64, m: &Marker) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO annotations (run_id, pid, tid, ts_ns, device, text) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(r)
    .bind(m.pid as i64)
    .bind(m.tid as i64)
    .bind(m.ts_ns as i64)
    .bind(m.device as i64)
    .bind(m.text.clone())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A process's cumulative dropped-events counter.
pub(super) async fn dropped(tx: &mut Tx, r: i64, d: &Dropped) -> Result<(), StoreError> {
    sqlx::query("UPDATE processes SET dropped_events = $1 WHERE run_id = $2 AND pid = $3")
        .bind(d.dropped_total as i64)
        .bind(r)
        .bind(d.pid as i64)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A process's end (exit status and time).
pub(super) async fn process_end(tx: &mut Tx, r: i64, pe: &ProcessEnd) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE processes SET exit_code = $1, end_ts_ns = $2 \
         WHERE run_id = $3 AND pid = $4",
    )
    // An unknown status is stored as NULL, as `memwatch report
    // --json` says it; end_ts_ns still marks the end.
    .bind(pe.known_exit_code().map(i64::from))
    .bind(pe.ts_ns as i64)
    .bind(r)
    .bind(pe.pid as i64)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A device-memory sample of node `node_id`, received at `now`, of the `devices` row
/// `device_id` (`None`: no row describes the device).
pub(super) async fn device_sample(
    tx: &mut Tx,
    node_id: i64,
    s: &DeviceSample,
    device_id: Option<i64>,
    now: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO device_samples (node_id, device, memory, ts_ns, \
         used_bytes, total_bytes, source, received_unix_ns, device_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(node_id)
    .bind(s.device as i64)
    .bind(s.memory as i64)
    .bind(s.ts_ns as i64)
    .bind(s.used_bytes as i64)
    .bind(s.total_bytes as i64)
    .bind(s.source.clone())
    .bind(now)
    .bind(device_id)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A pid's next image (an exec), to store in `process_images`.
pub(super) struct ImageStart {
    pub run: i64,
    pub pid: u32,
    pub image: u32,
    pub ts: u64,
}

/// Stores an exec image's start (a batch resent after a failed commit stores it once).
pub(super) async fn process_image(tx: &mut Tx, x: &ImageStart) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO process_images (run_id, pid, image, start_ts_ns) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (run_id, pid, image) DO NOTHING",
    )
    .bind(x.run)
    .bind(i64::from(x.pid))
    .bind(i64::from(x.image))
    .bind(x.ts as i64)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
