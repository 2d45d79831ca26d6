//! Ingest of the PJRT wrapper's records, inside the commit's transaction: executables
//! with their compiled memory statistics, the framework allocator's memory-statistics
//! samples, and from the events: compiles and loads (`pjrt_compiles`), executions (call
//! and device-side completion per device), PJRT buffers (created/freed), and an incident
//! for every execute that failed
//! (synchronously, through its completion event, or through an output buffer's ready
//! event). The `runtime` feature reads these tables back.

use std::collections::HashMap;

use memwatch_analysis::runtime::OutputOrder;
use memwatch_wire::{Api, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats};

use super::Tx;
use crate::codes;
use crate::db::{now_unix_ns, StoreError};

/// Stores one `pjrt_executable` record of run `run`.
pub(super) async fn store_executable(
    tx: &mut Tx,
    run: i64,
    x: &PjrtExecutable,
) -> Result<(), StoreError> {
    let devices = x
        .devices
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let s = &x.stats;
    sqlx::query(
        "INSERT INTO pjrt_executables (run_id, pid, handle, ts_ns, flags, devices, name, \
         fingerprint, generated_code_bytes, argument_bytes, output_bytes, alias_bytes, \
         temp_bytes, host_generated_code_bytes, host_argument_bytes, host_output_bytes, \
         host_alias_bytes, host_temp_bytes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
         $11, $12, $13, $14, $15, $16, $17, $18)",
    )
    .bind(run)
    .bind(x.pid as i64)
    .bind(x.handle as i64)
    .bind(x.ts_ns as i64)
    .bind(x.flags as i64)
    .bind(devices)
    .bind(x.name.clone())
    .bind(x.fingerprint.clone())
    .bind(s.generated_code)
    .bind(s.argument)
    .bind(s.output)
    .bind(s.alias)
    .bind(s.temp)
    .bind(s.host_generated_code)
    .bind(s.host_argument)
    .bind(s.host_output)
    .bind(s.host_alias)
    .bind(s.host_temp)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Stores one `pjrt_memory_stats` record of run `run`.
pub(super) async fn store_memory_stats(
    tx: &mut Tx,
    run: i64,
    s: &PjrtMemoryStats,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO pjrt_memory_stats (run_id, pid, device, ts_ns, flags, bytes_in_use, \
         peak_bytes_in_use, largest_free_block, pool_bytes, peak_pool_bytes, bytes_limit, \
         num_allocs, largest_alloc_size) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
         $12, $13)",
    )
    .bind(run)
    .bind(s.pid as i64)
    .bind(s.device as i64)
    .bind(s.ts_ns as i64)
    .bind(s.flags as i64)
    .bind(s.bytes_in_use)
    .bind(s.peak_bytes_in_use)
    .bind(s.largest_free_block)
    .bind(s.pool_bytes)
    .bind(s.peak_pool_bytes)
    .bind(s.bytes_limit)
    .bind(s.num_allocs)
    .bind(s.largest_alloc_size)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// One execution row not yet written.
struct ExecRow {
    pid: i64,
    device: i64,
    handle: i64,
    start: i64,
    call: i64,
    result: i64,
    requested: i64,
    complete: Option<(i64, i64, i64)>,
}

/// One buffer row not yet written.
struct BufRow {
    pid: i64,
    device: i64,
    ptr: i64,
    size: i64,
    api: i64,
    producer: i64,
    ts: i64,
    freed: Option<i64>,
    /// Which output of `producer` it is (execute outputs only).
    output_index: Option<i64>,
}

/// Stores the PJRT events among `events` (the rest are left to the event chunks, which
/// hold every event anyway): executions, completions, buffers, failed executes.
/// Executions and buffers of the batch are written with multi-row inserts; a completion
/// or free of a row of the same batch is applied before writing, one of an earlier batch
/// with an UPDATE. Execute outputs are numbered by `outputs`, the run's [`OutputOrder`].
pub(super) async fn store_events(
    tx: &mut Tx,
    run: i64,
    events: &[Event],
    outputs: &mut OutputOrder,
) -> Result<(), StoreError> {
    let mut execs: Vec<ExecRow> = Vec::new();
    let mut exec_at: HashMap<(i64, i64, i64, i64), usize> = HashMap::new();
    let mut bufs: Vec<BufRow> = Vec::new();
    let mut live_at: HashMap<(i64, i64), usize> = HashMap::new();
    for e in events.iter().filter(|e| codes::is_pjrt(e)) {
        let (pid, device, ptr) = (e.pid as i64, e.device as i64, e.ptr as i64);
        match (codes::api(e.api), codes::event_kind(e.kind)) {
            // Compiles and loads (few): the framework view's compile lane.
            (Api::PjrtClientCompile | Api::PjrtDeserializeAndLoad, Some(EventKind::ApiSpan)) => {
                sqlx::query(
                    "INSERT INTO pjrt_compiles (run_id, pid, api, handle, ts_ns, duration_ns, \
                     result) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(run)
                .bind(pid)
                .bind(e.api as i64)
                .bind(ptr)
                .bind(e.ts_ns as i64)
                .bind(e.duration_ns as i64)
                .bind(e.result as i64)
                .execute(&mut **tx)
                .await?;
            }
            (Api::PjrtExecute, _) => {
                exec_at.insert((pid, ptr, device, e.ts_ns as i64), execs.len());
                execs.push(ExecRow {
                    pid,
                    device,
                    handle: ptr,
                    start: e.ts_ns as i64,
                    call: e.duration_ns as i64,
                    result: e.result as i64,
                    requested: e.size as i64,
                    complete: None,
                });
                if e.result != 0 {
                    incident(tx, run, e).await?;
                }
            }
            (Api::PjrtExecuteComplete, _) => {
                let done = (e.duration_ns as i64, e.result as i64, e.size as i64);
                match exec_at.get(&(pid, ptr, device, e.ts_ns as i64)) {
                    Some(&i) => execs[i].complete = Some(done),
                    None => {
                        sqlx::query(
                            "UPDATE pjrt_executions SET complete_ns = $1, complete_result = $2, \
                             complete_requested_bytes = $3 WHERE run_id = $4 AND pid = $5 \
                             AND handle = $6 AND device = $7 AND start_ns = $8",
                        )
                        .bind(done.0)
                        .bind(done.1)
                        .bind(done.2)
                        .bind(run)
                        .bind(pid)
                        .bind(ptr)
                        .bind(device)
                        .bind(e.ts_ns as i64)
                        .execute(&mut **tx)
                        .await?;
                    }
                }
                if e.result != 0 {
                    incident(tx, run, e).await?;
                }
            }
            (_, Some(EventKind::Alloc))
                if codes::mem_kind(e.mem_kind) == Some(MemKind::PjrtBuffer) =>
            {
                live_at.insert((pid, ptr), bufs.len());
                bufs.push(BufRow {
                    pid,
                    device,
                    ptr,
                    size: e.size as i64,
                    api: e.api as i64,
                    producer: e.aux as i64,
                    ts: e.ts_ns as i64,
                    freed: None,
                    output_index: outputs.index(e).map(i64::from),
                });
            }
            (_, Some(EventKind::Free)) => match live_at.remove(&(pid, ptr)) {
                Some(i) => bufs[i].freed = Some(e.ts_ns as i64),
                None => {
                    sqlx::query(
                        "UPDATE pjrt_buffers SET freed_ts_ns = $1 WHERE run_id = $2 AND pid = $3 \
                         AND ptr = $4 AND freed_ts_ns IS NULL",
                    )
                    .bind(e.ts_ns as i64)
                    .bind(run)
                    .bind(pid)
                    .bind(ptr)
                    .execute(&mut **tx)
                    .await?;
                }
            },
            _ => {}
        }
    }
    for group in execs.chunks(ROWS_PER_INSERT) {
        let sql = multi_row(
            "INSERT INTO pjrt_executions (run_id, pid, device, handle, start_ns, call_ns, \
             result, requested_bytes, complete_ns, complete_result, complete_requested_bytes) VALUES ",
            11,
            group.len(),
        );
        let mut q = sqlx::query(&sql);
        for r in group {
            q = q
                .bind(run)
                .bind(r.pid)
                .bind(r.device)
                .bind(r.handle)
                .bind(r.start)
                .bind(r.call)
                .bind(r.result)
                .bind(r.requested)
                .bind(r.complete.map(|c| c.0))
                .bind(r.complete.map(|c| c.1))
                .bind(r.complete.map(|c| c.2));
        }
        q.execute(&mut **tx).await?;
    }
    for group in bufs.chunks(ROWS_PER_INSERT) {
        let sql = multi_row(
            "INSERT INTO pjrt_buffers (run_id, pid, device, ptr, size, api, producer, ts_ns, \
             freed_ts_ns, output_index) VALUES ",
            10,
            group.len(),
        );
        let mut q = sqlx::query(&sql);
        for r in group {
            q = q
                .bind(run)
                .bind(r.pid)
                .bind(r.device)
                .bind(r.ptr)
                .bind(r.size)
                .bind(r.api)
                .bind(r.producer)
                .bind(r.ts)
                .bind(r.freed)
                .bind(r.output_index);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}

/// Rows per multi-row INSERT: sqlx binds SQLite parameters by name, which costs time
/// quadratic in the parameters of one statement, so statements stay small.
const ROWS_PER_INSERT: usize = 8;

/// `head` followed by `rows` groups of `cols` numbered placeholders.
fn multi_row(head: &str, cols: usize, rows: usize) -> String {
    let mut sql = String::with_capacity(head.len() + rows * cols * 5);
    sql.push_str(head);
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..cols {
            if c > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", r * cols + c + 1));
        }
        sql.push(')');
    }
    sql
}

/// A failed execute becomes an incident; its live bytes are the allocator's bytes in use
/// of the last memory-statistics sample of that device (0 when none was taken yet).
async fn incident(tx: &mut Tx, run: i64, e: &Event) -> Result<(), StoreError> {
    let row: Option<i64> = sqlx::query_scalar(
        "SELECT bytes_in_use FROM pjrt_memory_stats WHERE run_id = $1 AND pid = $2 \
         AND device = $3 AND ts_ns <= $4 ORDER BY ts_ns DESC LIMIT 1",
    )
    .bind(run)
    .bind(e.pid as i64)
    .bind(e.device as i64)
    .bind(e.ts_ns.saturating_add(e.duration_ns) as i64)
    .fetch_optional(&mut **tx)
    .await?;
    let live = row.unwrap_or(0);
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
    .bind(live)
    .bind(now_unix_ns())
    .execute(&mut **tx)
    .await?;
    Ok(())
}
