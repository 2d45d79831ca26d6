//! Dashboard-only reads that the JSON API does not offer: API spans in a time range
//! (bounded), whether a run is still receiving data, XLA modules and gate results.
//!
//! Read-only, parameterised SQL on the daemon's schema; decoding of stored events uses
//! `memwatch-wire`. Never writes.

use memwatch_wire::frame::decode_event;
use memwatch_wire::{Api, EventKind, EVENT_SIZE};
use sqlx::Row;

use crate::store::{col_i64, now_unix_ns, Store, StoreError};

/// Most raw event chunks (8192 events each) read to draw span lanes.
pub const SPAN_CHUNK_BUDGET: i64 = 24;

/// API spans (and timed allocation calls) of a run in `[from, to)` ns since its start.
pub struct SpanSet {
    /// (pid, tid) per lane.
    pub lanes: Vec<(u32, u32)>,
    /// (lane, start, end, api name).
    pub spans: Vec<(usize, u64, u64, &'static str)>,
    /// The range holds more raw data than the budget: zoom in to see spans.
    pub too_many: bool,
    /// Raw events for the range were deleted by retention (or none were stored).
    pub raw_chunks: i64,
}

/// Reads the spans of run `run` over `[from, to)`; `None` when the run does not exist.
pub async fn spans(
    store: &Store,
    run: i64,
    from: u64,
    to: u64,
) -> Result<Option<SpanSet>, StoreError> {
    let Some(t0) = store.run_t0(run).await? else {
        return Ok(None);
    };
    let lo = (t0 + from) as i64;
    let hi = (t0.saturating_add(to)).min(i64::MAX as u64) as i64;
    let n = sqlx::query(
        "SELECT COUNT(*) FROM event_chunks WHERE run_id = $1 AND ts_last >= $2 AND ts_first < $3",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .fetch_one(&store.pool)
    .await?;
    let raw_chunks = col_i64(&n, 0)?;
    let mut set = SpanSet {
        lanes: Vec::new(),
        spans: Vec::new(),
        too_many: raw_chunks > SPAN_CHUNK_BUDGET,
        raw_chunks,
    };
    if set.too_many || raw_chunks == 0 {
        return Ok(Some(set));
    }
    let rows = sqlx::query(
        "SELECT events FROM event_chunks WHERE run_id = $1 AND ts_last >= $2 AND ts_first < $3 \
         ORDER BY id LIMIT $4",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .bind(SPAN_CHUNK_BUDGET)
    .fetch_all(&store.pool)
    .await?;
    for row in &rows {
        let blob: Vec<u8> = row.try_get(0)?;
        for slot in blob.chunks_exact(EVENT_SIZE) {
            let mut b = [0u8; EVENT_SIZE];
            b.copy_from_slice(slot);
            let e = decode_event(&b);
            let dur = match EventKind::from_u8(e.kind) {
                Some(EventKind::ApiSpan) => e.aux.max(e.duration_ns),
                Some(_) => e.duration_ns,
                None => 0,
            };
            if dur == 0 {
                continue;
            }
            let start = e.call_start_ns().saturating_sub(t0);
            let end = start + dur;
            if end < from || start >= to {
                continue;
            }
            let key = (e.pid, e.tid);
            let lane = match set.lanes.iter().position(|l| *l == key) {
                Some(i) => i,
                None => {
                    if set.lanes.len() >= 64 {
                        continue;
                    }
                    set.lanes.push(key);
                    set.lanes.len() - 1
                }
            };
            set.spans
                .push((lane, start, end, Api::from_u16(e.api).name()));
        }
    }
    Ok(Some(set))
}

/// Whether run `run` is still going: a process without an end, and data within a minute.
pub async fn run_active(store: &Store, run: i64) -> Result<bool, StoreError> {
    let open = sqlx::query(
        "SELECT COUNT(*) FROM processes WHERE run_id = $1 AND end_ts_ns IS NULL AND exit_code IS NULL",
    )
    .bind(run)
    .fetch_one(&store.pool)
    .await?;
    if col_i64(&open, 0)? == 0 {
        return Ok(false);
    }
    let seen = sqlx::query(
        "SELECT n.last_seen_unix_ns FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?;
    Ok(match seen {
        Some(s) => now_unix_ns() - col_i64(&s, 0)? < 60_000_000_000,
        None => false,
    })
}

/// Event count and last timestamp of a run (what the live stream watches).
pub async fn run_progress(store: &Store, run: i64) -> Result<Option<(i64, i64)>, StoreError> {
    let r = sqlx::query("SELECT event_count, last_ts_ns - t0_mono_ns FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(&store.pool)
        .await?;
    match r {
        Some(r) => Ok(Some((col_i64(&r, 0)?, col_i64(&r, 1)?))),
        None => Ok(None),
    }
}

/// A stored XLA module summary.
pub struct XlaRow {
    pub id: i64,
    pub run_id: i64,
    pub name: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub alias_bytes: i64,
    pub total_allocation_bytes: i64,
}

pub async fn xla_modules(store: &Store, run: Option<i64>) -> Result<Vec<XlaRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, run_id, name, argument_bytes, output_bytes, temp_bytes, alias_bytes, \
         total_allocation_bytes FROM xla_modules WHERE ($1 < 0 OR run_id = $1) ORDER BY id DESC LIMIT 500",
    )
    .bind(run.unwrap_or(-1))
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(XlaRow {
                id: col_i64(r, 0)?,
                run_id: col_i64(r, 1)?,
                name: r.try_get::<String, _>(2)?,
                argument_bytes: col_i64(r, 3)?,
                output_bytes: col_i64(r, 4)?,
                temp_bytes: col_i64(r, 5)?,
                alias_bytes: col_i64(r, 6)?,
                total_allocation_bytes: col_i64(r, 7)?,
            })
        })
        .collect()
}

/// A stored gate result.
pub struct GateRow {
    pub name: String,
    pub run_id: Option<i64>,
    pub passed: bool,
    pub measured_bytes: i64,
    pub limit_bytes: i64,
    pub created_unix_ns: i64,
}

pub async fn gate_results(store: &Store) -> Result<Vec<GateRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT name, run_id, passed, measured_bytes, limit_bytes, created_unix_ns \
         FROM gate_results ORDER BY name, created_unix_ns DESC LIMIT 2000",
    )
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(GateRow {
                name: r.try_get::<String, _>(0)?,
                run_id: r.try_get::<Option<i64>, _>(1)?,
                passed: col_i64(r, 2)? != 0,
                measured_bytes: col_i64(r, 3)?,
                limit_bytes: col_i64(r, 4)?,
                created_unix_ns: col_i64(r, 5)?,
            })
        })
        .collect()
}

/// A run's header and per-device counters, without its annotations (which can number
/// tens of thousands and are read per visible range instead).
pub struct RunLite {
    pub id: i64,
    pub node: String,
    pub run_key: String,
    pub t0: i64,
    pub wall_anchor_unix_ns: i64,
    pub duration_ns: i64,
    pub event_count: i64,
    pub dropped_events: i64,
    /// `peak_ts_ns` relative to the run's start.
    pub devices: Vec<crate::store::query::RunDevice>,
}

pub async fn run_lite(store: &Store, run: i64) -> Result<Option<RunLite>, StoreError> {
    let Some(r) = sqlx::query(
        "SELECT r.id, n.name, r.run_key, r.t0_mono_ns, r.wall_anchor_unix_ns, r.last_ts_ns, \
         r.event_count, r.dropped_events FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = $1",
    )
    .bind(run)
    .fetch_optional(&store.pool)
    .await?
    else {
        return Ok(None);
    };
    let t0 = col_i64(&r, 3)?;
    let rows = sqlx::query(
        "SELECT device, live_bytes, peak_bytes, peak_ts_ns, alloc_count, free_count, \
         failed_count FROM run_devices WHERE run_id = $1 ORDER BY device",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    let devices = rows
        .iter()
        .map(|d| {
            Ok(crate::store::query::RunDevice {
                device: col_i64(d, 0)?,
                live_bytes: col_i64(d, 1)?,
                peak_bytes: col_i64(d, 2)?,
                peak_ts_ns: (col_i64(d, 3)? - t0).max(0),
                alloc_count: col_i64(d, 4)?,
                free_count: col_i64(d, 5)?,
                failed_count: col_i64(d, 6)?,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Some(RunLite {
        id: col_i64(&r, 0)?,
        node: r.try_get::<String, _>(1)?,
        run_key: r.try_get::<String, _>(2)?,
        t0,
        wall_anchor_unix_ns: col_i64(&r, 4)?,
        duration_ns: (col_i64(&r, 5)? - t0).max(0),
        event_count: col_i64(&r, 6)?,
        dropped_events: col_i64(&r, 7)?,
        devices,
    }))
}

/// Annotations of `run` in `[from, to)` ns since its start (at most `limit`, oldest
/// first) as (relative time, device, text), and how many the range holds in all.
pub async fn annotations_in(
    store: &Store,
    run: i64,
    t0: i64,
    from: u64,
    to: u64,
    limit: i64,
) -> Result<(Vec<(u64, i64, String)>, i64), StoreError> {
    let lo = t0.saturating_add(from.min(i64::MAX as u64) as i64);
    let hi = t0.saturating_add(to.min(i64::MAX as u64) as i64);
    let n = sqlx::query(
        "SELECT COUNT(*) FROM annotations WHERE run_id = $1 AND ts_ns >= $2 AND ts_ns < $3",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .fetch_one(&store.pool)
    .await?;
    let rows = sqlx::query(
        "SELECT ts_ns, device, text FROM annotations WHERE run_id = $1 AND ts_ns >= $2 \
         AND ts_ns < $3 ORDER BY ts_ns, id LIMIT $4",
    )
    .bind(run)
    .bind(lo)
    .bind(hi)
    .bind(limit)
    .fetch_all(&store.pool)
    .await?;
    let v = rows
        .iter()
        .map(|r| {
            Ok((
                (col_i64(r, 0)? - t0).max(0) as u64,
                col_i64(r, 1)?,
                r.try_get::<String, _>(2)?,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok((v, col_i64(&n, 0)?))
}

/// Processes of a run: (pid, hostname, argv, exit code, dropped events).
pub async fn processes(
    store: &Store,
    run: i64,
) -> Result<Vec<(i64, String, Vec<String>, Option<i64>, i64)>, StoreError> {
    let rows = sqlx::query(
        "SELECT pid, hostname, argv, exit_code, dropped_events FROM processes \
         WHERE run_id = $1 ORDER BY pid LIMIT 1000",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                col_i64(r, 0)?,
                r.try_get::<String, _>(1)?,
                serde_json::from_str(&r.try_get::<String, _>(2)?).unwrap_or_default(),
                r.try_get::<Option<i64>, _>(3)?,
                col_i64(r, 4)?,
            ))
        })
        .collect()
}
