//! Writing what ingest produced, inside the commit's transaction: finished event chunks
//! and closed rollup buckets while later events are still being applied
//! ([`Ingestor::apply_and_write`](super::Ingestor)), then per run the open chunks and
//! buckets, the per-device counters, moved peaks (`peak_rows`), incidents, releases across
//! devices and the run's totals
//! ([`flush_run`]). Statements are multi-row with power-of-two shapes (each prepared once
//! per connection); SQLite gets anonymous `?` placeholders (see [`push_values`]).

use std::collections::{HashMap, HashSet};

use super::peak_rows::write_peak;
use super::rollup::RollupRow;
use super::run_state::{Chunk, RunState};
use super::Tx;
use crate::codes;
use crate::db::{Backend, StoreError};

/// Rows per multi-row rollup upsert: 7 parameters each, well under SQLite's 32,766 and
/// PostgreSQL's 65,535 bind parameters per statement.
const ROLLUP_ROWS_PER_INSERT: usize = 2048;

/// Appends `rows` parenthesised groups of `cols` placeholders. SQLite gets anonymous `?`
/// (sqlx looks each numbered parameter's name up in a list, which makes a statement with
/// thousands of `$N` quadratic); PostgreSQL needs `$N`.
pub(super) fn push_values(sql: &mut String, backend: Backend, rows: usize, cols: usize) {
    use std::fmt::Write;
    for i in 0..rows {
        sql.push_str(if i == 0 { "(" } else { ",(" });
        for c in 0..cols {
            if c > 0 {
                sql.push(',');
            }
            match backend {
                Backend::Sqlite => sql.push('?'),
                Backend::Postgres => {
                    let _ = write!(sql, "${}", i * cols + c + 1);
                }
            }
        }
        sql.push(')');
    }
}

/// Writes what run `st` holds unwritten: open chunks and buckets, counters, a moved peak's
/// live allocations (`peak_rows`), incidents, the run's totals.
pub(super) async fn flush_run(
    tx: &mut Tx,
    backend: Backend,
    st: &mut RunState,
    now: i64,
) -> Result<(), StoreError> {
    let run = st.run_id;
    let devices: Vec<i32> = st
        .devices
        .iter()
        .filter(|(_, d)| d.dirty)
        .map(|(k, _)| *k)
        .collect();
    // Gather every dirty device's rows first, then write them in a few multi-row
    // statements: each statement is a round trip, and on a busy machine each round
    // trip waits for the other side to be scheduled.
    let mut chunks: Vec<ChunkRow> = Vec::new();
    let mut rollups: Vec<RollRow> = Vec::new();
    let mut counters: Vec<[i64; 8]> = Vec::new();
    let mut peaks: Vec<(i32, i64, i64)> = Vec::new();
    for dev in devices {
        let Some(d) = st.devices.get_mut(&dev) else {
            continue;
        };
        chunks.extend(
            std::mem::take(&mut d.full_chunks)
                .into_iter()
                .chain(d.chunk.take())
                .map(|c| (run, dev, c)),
        );
        rollups.extend(
            std::mem::take(&mut d.closed)
                .into_iter()
                .chain(d.acc.open_rows())
                .map(|r| (run, dev, r)),
        );
        counters.push([
            run,
            dev as i64,
            d.live_bytes,
            d.peak_bytes,
            d.peak_ts as i64,
            d.allocs,
            d.frees,
            d.failed,
        ]);
        if d.peak_moved {
            peaks.push((dev, d.peak_bytes, d.peak_ts as i64));
        }
        d.dirty = false;
    }
    insert_chunks(tx, backend, chunks, now).await?;
    upsert_rollups(tx, backend, &rollups).await?;
    for group in counters.chunks(64) {
        let mut sql = String::from(
            "INSERT INTO run_devices (run_id, device, live_bytes, peak_bytes, peak_ts_ns, \
             alloc_count, free_count, failed_count) VALUES ",
        );
        push_values(&mut sql, backend, group.len(), 8);
        sql.push_str(
            " ON CONFLICT (run_id, device) DO UPDATE SET live_bytes = excluded.live_bytes, \
             peak_bytes = excluded.peak_bytes, peak_ts_ns = excluded.peak_ts_ns, \
             alloc_count = excluded.alloc_count, free_count = excluded.free_count, \
             failed_count = excluded.failed_count",
        );
        let mut q = sqlx::query(&sql);
        for row in group {
            for v in row {
                q = q.bind(*v);
            }
        }
        q.execute(&mut **tx).await?;
    }
    for (dev, peak_bytes, peak_ts) in peaks {
        if let Some((plan, at)) = st.take_peak(dev) {
            write_peak(tx, backend, run, dev, peak_bytes, peak_ts, plan, &at).await?;
        }
    }
    for inc in std::mem::take(&mut st.incidents) {
        let e = inc.event;
        sqlx::query(
            "INSERT INTO incidents (run_id, pid, tid, device, ts_ns, size, result, api, \
             live_bytes, created_unix_ns) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(run)
        .bind(e.pid as i64)
        .bind(e.tid as i64)
        .bind(e.device as i64)
        .bind(e.ts_ns as i64)
        .bind(e.size as i64)
        .bind(e.result as i64)
        .bind(codes::api_name(e.api).to_string())
        .bind(inc.live_bytes)
        .bind(now)
        .execute(&mut **tx)
        .await?;
    }
    for r in std::mem::take(&mut st.releases) {
        let e = r.event;
        sqlx::query(
            "INSERT INTO device_releases (run_id, device, ts_ns, pid, ptr, mem_kind, api) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(run)
        .bind(i64::from(r.device))
        .bind(e.ts_ns as i64)
        .bind(i64::from(e.pid))
        .bind(e.ptr as i64)
        .bind(i64::from(e.mem_kind))
        .bind(i64::from(e.api))
        .execute(&mut **tx)
        .await?;
    }
    let dropped: u64 = st.dropped.values().sum();
    sqlx::query(
        "UPDATE runs SET event_count = $1, last_ts_ns = $2, dropped_events = $3 WHERE id = $4",
    )
    .bind(st.event_count)
    .bind(st.last_ts as i64)
    .bind(dropped as i64)
    .bind(run)
    .execute(&mut **tx)
    .await?;
    st.dirty = false;
    Ok(())
}

/// A finished event chunk of one (run, device).
type ChunkRow = (i64, i32, Chunk);

/// A rollup row of one (run, device).
type RollRow = (i64, i32, RollupRow);

/// Chunks per multi-row insert (12 parameters each; up to ~4.5 MiB of blobs).
const CHUNK_ROWS_PER_INSERT: usize = 8;

/// Power-of-two statement sizes up to `max`: at most a few statement shapes, each
/// prepared once per connection and then reused from sqlx's cache.
pub(super) fn group_len(rest: usize, max: usize) -> usize {
    if rest >= max {
        max
    } else {
        1 << rest.ilog2()
    }
}

/// Inserts finished event chunks in order (ids follow the order given, so each
/// device's chunks keep their order).
async fn insert_chunks(
    tx: &mut Tx,
    backend: Backend,
    chunks: Vec<ChunkRow>,
    now: i64,
) -> Result<(), StoreError> {
    let mut rest = chunks.len();
    let mut it = chunks.into_iter();
    while rest > 0 {
        let take = group_len(rest, CHUNK_ROWS_PER_INSERT);
        rest -= take;
        let mut sql = String::from(
            "INSERT INTO event_chunks (run_id, device, ts_first, ts_last, n_events, \
             live_start, live_min, live_max, live_end, created_unix_ns, events, deltas) VALUES ",
        );
        push_values(&mut sql, backend, take, 12);
        let mut q = sqlx::query(&sql);
        for (run, dev, c) in it.by_ref().take(take) {
            q = q
                .bind(run)
                .bind(dev as i64)
                .bind(c.ts_first as i64)
                .bind(c.ts_last as i64)
                .bind(c.n as i64)
                .bind(c.live_start)
                .bind(c.live_min)
                .bind(c.live_max)
                .bind(c.live_end)
                .bind(now)
                .bind(c.events)
                .bind(c.deltas);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Upserts rollup rows (closed buckets are final; open ones are overwritten at the next
/// commit). No key may appear twice in `rows`.
async fn upsert_rollups(tx: &mut Tx, backend: Backend, rows: &[RollRow]) -> Result<(), StoreError> {
    let mut rest: &[RollRow] = rows;
    while !rest.is_empty() {
        let (group, tail) = rest.split_at(group_len(rest.len(), ROLLUP_ROWS_PER_INSERT));
        rest = tail;
        let mut sql = String::from(
            "INSERT INTO rollups (run_id, device, level, bucket, lo, hi, last) VALUES ",
        );
        push_values(&mut sql, backend, group.len(), 7);
        sql.push_str(
            " ON CONFLICT (run_id, device, level, bucket) DO UPDATE SET \
             lo = excluded.lo, hi = excluded.hi, last = excluded.last",
        );
        let mut q = sqlx::query(&sql);
        for (run, dev, r) in group {
            q = q
                .bind(*run)
                .bind(*dev as i64)
                .bind(r.level as i64)
                .bind(r.b.bucket)
                .bind(r.b.lo)
                .bind(r.b.hi)
                .bind(r.b.last);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Finished chunks and closed rollups, ready to be written.
pub(super) type Ready = (Vec<ChunkRow>, Vec<RollRow>);

/// Events applied per slice of [`Ingestor::apply_and_write`].
pub(super) const APPLY_SLICE: usize = 1 << 18;

/// Takes the finished chunks and closed rollups of `runs` out of their state.
pub(super) fn take_ready(runs: &mut HashMap<i64, RunState>, which: &HashSet<i64>) -> Ready {
    let (mut chunks, mut rollups) = (Vec::new(), Vec::new());
    for r in which {
        let Some(st) = runs.get_mut(r) else { continue };
        for (dev, d) in st.devices.iter_mut() {
            chunks.extend(
                std::mem::take(&mut d.full_chunks)
                    .into_iter()
                    .map(|c| (*r, *dev, c)),
            );
            rollups.extend(
                std::mem::take(&mut d.closed)
                    .into_iter()
                    .map(|x| (*r, *dev, x)),
            );
        }
    }
    (chunks, rollups)
}

pub(super) async fn write_ready(
    tx: &mut Tx,
    backend: Backend,
    ready: Ready,
    now: i64,
) -> Result<(), StoreError> {
    let (chunks, rollups) = ready;
    insert_chunks(tx, backend, chunks, now).await?;
    upsert_rollups(tx, backend, &rollups).await
}
