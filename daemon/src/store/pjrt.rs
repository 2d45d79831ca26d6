//! PJRT runtime records (issue 9): storing and reading them back.
//!
//! Owns the `pjrt_*` tables of migration 0002 and the XLA modules attached to a run:
//! - ingest hooks ([`store_executable`], [`store_memory_stats`], [`store_events`]) called by
//!   `store::ingest` inside its transaction: executables with their compiled memory
//!   statistics, executions (call and device-side completion per device), the framework
//!   allocator's memory-statistics samples, PJRT buffers (created/freed), and an incident
//!   for every execute that failed (synchronously, through its completion event, or through
//!   an output buffer's ready event);
//! - reads: [`runtime_capture`] rebuilds `memwatch_analysis::runtime::RuntimeCapture` from
//!   the tables so the attribution (runtime peak, executable running at it, co-resident
//!   buffers, the dump join by name and fingerprint/statistics) is computed by
//!   `memwatch_analysis::runtime` — the same code `memwatch runtime` runs on a capture file;
//!   [`device_runtime`] and [`peak_runtime`] shape its result for the API and dashboard;
//! - [`attach_modules`] / [`modules`]: XLA dump modules attached to a run (`xla_dumps`).
//!
//! It does not decide what counts as the peak or how an executable joins a module.

use std::collections::{BTreeMap, HashMap};

use memwatch_analysis::runtime::peak::{
    find_module, DeviceRuntime, ExecutableSummary, LiveGroup, OomIncident, PeakAttribution, Sample,
};
use memwatch_analysis::runtime::{analyse, join_dump, RuntimeCapture};
use memwatch_analysis::xla::{Group, ModuleReport, PeakBuffer};
use memwatch_wire::{
    Api, CompiledMemoryStats, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats,
};
use serde::Serialize;
use sqlx::{Any, Row, Transaction};

use super::{col_i64, Store, StoreError};

type Tx = Transaction<'static, Any>;

fn is_pjrt(e: &Event) -> bool {
    e.api >= 3000 && e.api_name() != Api::Unknown
}

/// Stores one `pjrt_executable` record of run `run`.
pub async fn store_executable(tx: &mut Tx, run: i64, x: &PjrtExecutable) -> Result<(), StoreError> {
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
pub async fn store_memory_stats(
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
}

/// Stores the PJRT events among `events` (the rest are left to the event chunks, which
/// hold every event anyway): executions, completions, buffers, failed executes.
/// Executions and buffers of the batch are written with multi-row inserts; a completion
/// or free of a row of the same batch is applied before writing, one of an earlier batch
/// with an UPDATE.
pub async fn store_events(tx: &mut Tx, run: i64, events: &[Event]) -> Result<(), StoreError> {
    let mut execs: Vec<ExecRow> = Vec::new();
    let mut exec_at: HashMap<(i64, i64, i64, i64), usize> = HashMap::new();
    let mut bufs: Vec<BufRow> = Vec::new();
    let mut live_at: HashMap<(i64, i64), usize> = HashMap::new();
    for e in events.iter().filter(|e| is_pjrt(e)) {
        let (pid, device, ptr) = (e.pid as i64, e.device as i64, e.ptr as i64);
        match (e.api_name(), e.event_kind()) {
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
            (_, Some(EventKind::Alloc)) if e.mem_kind == MemKind::PjrtBuffer as u8 => {
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
             freed_ts_ns) VALUES ",
            9,
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
                .bind(r.freed);
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
    let row = sqlx::query(
        "SELECT bytes_in_use FROM pjrt_memory_stats WHERE run_id = $1 AND pid = $2 \
         AND device = $3 AND ts_ns <= $4 ORDER BY ts_ns DESC LIMIT 1",
    )
    .bind(run)
    .bind(e.pid as i64)
    .bind(e.device as i64)
    .bind(e.ts_ns.saturating_add(e.duration_ns) as i64)
    .fetch_optional(&mut **tx)
    .await?;
    let live = match row {
        Some(r) => col_i64(&r, 0)?,
        None => 0,
    };
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
    .bind(e.api_name().name().to_string())
    .bind(live)
    .bind(super::now_unix_ns())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

// ------------------------------------------------------------------ reads

/// Whether run `run` has any PJRT record.
pub async fn has_records(store: &Store, run: i64) -> Result<bool, StoreError> {
    let row = sqlx::query(
        "SELECT (SELECT COUNT(*) FROM pjrt_executables WHERE run_id = $1) + \
         (SELECT COUNT(*) FROM pjrt_memory_stats WHERE run_id = $1)",
    )
    .bind(run)
    .fetch_one(&store.pool)
    .await?;
    Ok(col_i64(&row, 0)? > 0)
}

fn rel(ts: i64, t0: u64) -> u64 {
    (ts.max(0) as u64).saturating_sub(t0)
}

/// Rebuilds the run's PJRT records as the analysis reads them from a capture file
/// (timestamps relative to the run's start). None: no such run.
pub async fn runtime_capture(
    store: &Store,
    run: i64,
) -> Result<Option<RuntimeCapture>, StoreError> {
    let Some(t0) = store.run_t0(run).await? else {
        return Ok(None);
    };
    let mut cap = RuntimeCapture {
        origin_ns: t0,
        ..RuntimeCapture::default()
    };
    let rows = sqlx::query(
        "SELECT pid, handle, ts_ns, flags, devices, name, fingerprint, generated_code_bytes, \
         argument_bytes, output_bytes, alias_bytes, temp_bytes, host_generated_code_bytes, \
         host_argument_bytes, host_output_bytes, host_alias_bytes, host_temp_bytes \
         FROM pjrt_executables WHERE run_id = $1 ORDER BY id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    for r in &rows {
        let devices: String = r.try_get(4)?;
        let devices = devices
            .split(',')
            .filter(|d| !d.is_empty())
            .map(|d| {
                d.parse::<i32>()
                    .map_err(|_| StoreError::Corrupt(format!("pjrt_executables.devices {d:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        cap.executables.push(PjrtExecutable {
            pid: col_i64(r, 0)? as u32,
            handle: col_i64(r, 1)? as u64,
            ts_ns: rel(col_i64(r, 2)?, t0),
            flags: col_i64(r, 3)? as u32,
            stats: CompiledMemoryStats {
                generated_code: col_i64(r, 7)?,
                argument: col_i64(r, 8)?,
                output: col_i64(r, 9)?,
                alias: col_i64(r, 10)?,
                temp: col_i64(r, 11)?,
                host_generated_code: col_i64(r, 12)?,
                host_argument: col_i64(r, 13)?,
                host_output: col_i64(r, 14)?,
                host_alias: col_i64(r, 15)?,
                host_temp: col_i64(r, 16)?,
            },
            devices,
            name: r.try_get(5)?,
            fingerprint: r.try_get(6)?,
        });
    }
    let rows = sqlx::query(
        "SELECT pid, device, ts_ns, flags, bytes_in_use, peak_bytes_in_use, largest_free_block, \
         pool_bytes, peak_pool_bytes, bytes_limit, num_allocs, largest_alloc_size \
         FROM pjrt_memory_stats WHERE run_id = $1 ORDER BY ts_ns",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    for r in &rows {
        cap.stats.push(PjrtMemoryStats {
            pid: col_i64(r, 0)? as u32,
            device: col_i64(r, 1)? as i32,
            ts_ns: rel(col_i64(r, 2)?, t0),
            flags: col_i64(r, 3)? as u32,
            bytes_in_use: col_i64(r, 4)?,
            peak_bytes_in_use: col_i64(r, 5)?,
            largest_free_block: col_i64(r, 6)?,
            pool_bytes: col_i64(r, 7)?,
            peak_pool_bytes: col_i64(r, 8)?,
            bytes_limit: col_i64(r, 9)?,
            num_allocs: col_i64(r, 10)?,
            largest_alloc_size: col_i64(r, 11)?,
        });
    }
    let span =
        |pid: i64, device: i64, api: Api, ts: u64, dur: i64, ptr: i64, res: i64, size| Event {
            ts_ns: ts,
            duration_ns: dur.max(0) as u64,
            ptr: ptr as u64,
            size: size as u64,
            pid: pid as u32,
            device: device as i32,
            result: res as i32,
            api: api as u16,
            kind: EventKind::ApiSpan as u8,
            ..Event::default()
        };
    let rows = sqlx::query(
        "SELECT pid, device, handle, start_ns, call_ns, result, requested_bytes, complete_ns, \
         complete_result, complete_requested_bytes FROM pjrt_executions WHERE run_id = $1 \
         ORDER BY start_ns, id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    for r in &rows {
        let (pid, device, handle) = (col_i64(r, 0)?, col_i64(r, 1)?, col_i64(r, 2)?);
        let start = rel(col_i64(r, 3)?, t0);
        cap.events.push(span(
            pid,
            device,
            Api::PjrtExecute,
            start,
            col_i64(r, 4)?,
            handle,
            col_i64(r, 5)?,
            col_i64(r, 6)?,
        ));
        if let Some(done) = r.try_get::<Option<i64>, _>(7)? {
            let res = r.try_get::<Option<i64>, _>(8)?.unwrap_or(0);
            let size = r.try_get::<Option<i64>, _>(9)?.unwrap_or(0);
            cap.events.push(span(
                pid,
                device,
                Api::PjrtExecuteComplete,
                start,
                done,
                handle,
                res,
                size,
            ));
        }
    }
    let rows = sqlx::query(
        "SELECT pid, device, ptr, size, api, producer, ts_ns, freed_ts_ns FROM pjrt_buffers \
         WHERE run_id = $1 ORDER BY id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    for r in &rows {
        let alloc = Event {
            pid: col_i64(r, 0)? as u32,
            device: col_i64(r, 1)? as i32,
            ptr: col_i64(r, 2)? as u64,
            size: col_i64(r, 3)? as u64,
            api: col_i64(r, 4)? as u16,
            aux: col_i64(r, 5)? as u64,
            ts_ns: rel(col_i64(r, 6)?, t0),
            kind: EventKind::Alloc as u8,
            mem_kind: MemKind::PjrtBuffer as u8,
            ..Event::default()
        };
        if let Some(freed) = r.try_get::<Option<i64>, _>(7)? {
            cap.events.push(Event {
                ts_ns: rel(freed, t0),
                api: Api::PjrtBufferDestroy as u16,
                kind: EventKind::Free as u8,
                size: 0,
                aux: 0,
                device: -1,
                ..alloc
            });
        }
        cap.events.push(alloc);
    }
    // Stable: at equal times an allocation stays before a later free of the same pointer.
    cap.events
        .sort_by_key(|e| (e.ts_ns, e.kind == EventKind::Free as u8));
    Ok(Some(cap))
}

/// Attaches `mods` (an XLA dump's module reports, read from `source`) to run `run`, in
/// the dashboard's dump tables (`xla_dumps`/`xla_dump_modules`, migration 0004), where the
/// XLA module page finds them too; attaching the same source again replaces its modules.
/// Returns how many were stored; None when there is no such run.
pub async fn attach_modules(
    store: &Store,
    run: i64,
    source: &str,
    mods: &[ModuleReport],
) -> Result<Option<usize>, StoreError> {
    if store.run_t0(run).await?.is_none() {
        return Ok(None);
    }
    let rows = mods
        .iter()
        .map(super::dash::NewModule::from_report)
        .collect::<Result<Vec<_>, _>>()?;
    store.attach_run_dump(run, source, &rows).await?;
    Ok(Some(mods.len()))
}

/// The XLA modules of the dumps attached to run `run` (oldest first).
pub async fn modules(store: &Store, run: i64) -> Result<Vec<ModuleReport>, StoreError> {
    let rows = sqlx::query(
        "SELECT m.id, m.report_json FROM xla_dump_modules m JOIN xla_dumps d ON d.id = m.dump_id \
         WHERE d.run_id = $1 ORDER BY m.id",
    )
    .bind(run)
    .fetch_all(&store.pool)
    .await?;
    rows.iter()
        .map(|r| {
            let id = col_i64(r, 0)?;
            let text: String = r.try_get(1)?;
            serde_json::from_str(&text).map_err(|e| {
                StoreError::Corrupt(format!("xla_dump_modules row {id}: report_json: {e}"))
            })
        })
        .collect()
}

// ------------------------------------------------------------------ views

/// One execution on the device, as a span (times relative to the run's start).
#[derive(Debug, Clone, Serialize)]
pub struct ExecutionSpan {
    pub pid: u32,
    pub executable: String,
    pub handle: u64,
    pub start_ns: u64,
    /// Completion when seen, else the call's return.
    pub end_ns: u64,
    pub completed: bool,
    /// 0 = OK, else the PJRT error code (of the call, or of its completion).
    pub result: i32,
}

/// `/api/runs/{id}/runtime` for one device.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeView {
    pub run_id: i64,
    pub device: i64,
    pub pid: Option<u32>,
    /// Memory-statistics samples stored for the device.
    pub samples: u64,
    /// The allocator's timeline (bytes in use, pool, largest free block, limit), at most
    /// `points` samples: when there are more, each bucket keeps its sample with the most
    /// bytes in use, so no peak is hidden.
    pub timeline: Vec<Sample>,
    pub executions: Vec<ExecutionSpan>,
    /// How many executions exist (`executions` holds at most `limit`).
    pub execution_count: u64,
    pub executables: Vec<ExecutableSummary>,
    pub peak: Option<PeakAttribution>,
    /// The executable running at the runtime peak, with its compiled statistics.
    pub peak_executable: Option<ExecutableSummary>,
    pub ooms: Vec<OomIncident>,
    pub xla_modules_attached: u64,
}

/// What the runtime records add to `/api/runs/{id}/peak`.
#[derive(Debug, Clone, Serialize)]
pub struct PeakRuntime {
    /// "allocator statistics": the runtime peak of the PJRT memory statistics (BFC);
    /// "driver peak": no statistics were recorded (e.g. XLA_PYTHON_CLIENT_ALLOCATOR=platform),
    /// so the executables and buffers are those at the driver-level peak.
    pub basis: String,
    pub pid: u32,
    /// Time of the sample that first showed the runtime peak (relative to the run start).
    pub ts_ns: u64,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: Option<u64>,
    pub bytes_limit: Option<u64>,
    pub largest_free_block_bytes: Option<u64>,
    pub executable: Option<String>,
    pub executable_stats: Option<ExecutableSummary>,
    pub running: Vec<String>,
    pub live_buffer_bytes: u64,
    pub running_temp_bytes: u64,
    pub explained_bytes: u64,
    pub unexplained_bytes: u64,
    pub co_resident: Vec<LiveGroup>,
    /// Live-at-peak bytes by XLA module: the running executable's temp plus the live
    /// buffers each (co-resident) executable produced, named by its dump module when a
    /// dump is attached (else by the executable name).
    pub by_xla_module: Vec<ModuleShare>,
    /// The running module's buffers live at its peak, by HLO op_name (attached dump only).
    pub by_hlo_op: Vec<Group>,
    /// The same, by HLO op category (attached dump only).
    pub by_hlo_category: Vec<Group>,
    /// The running module's largest buffers live at its peak (attached dump only).
    pub hlo_buffers: Vec<PeakBuffer>,
    /// Module the running executable joined to and how ("name+stats" / "name").
    pub xla_module: Option<String>,
    pub matched_by: Option<String>,
    pub xla_modules_attached: u64,
}

/// Bytes of one module (or executable) at the runtime peak.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleShare {
    pub module: String,
    pub executable: String,
    /// "temp" (scratch of the running executable) or "live buffers" (its outputs alive).
    pub role: String,
    pub bytes: u64,
}

struct Analysed {
    pid: u32,
    executables: Vec<ExecutableSummary>,
    device: DeviceRuntime,
    ooms: Vec<OomIncident>,
    modules: Vec<ModuleReport>,
}

/// Runs the analysis over the stored records and picks the process that used `device`
/// most (largest runtime peak). Outer None: no such run; inner None: no PJRT records for
/// the device.
async fn analysed(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
    timeline: bool,
) -> Result<Option<(RuntimeCapture, Option<Analysed>)>, StoreError> {
    let Some(cap) = runtime_capture(store, run).await? else {
        return Ok(None);
    };
    let modules = modules(store, run).await?;
    let mut report = analyse(&cap, timeline);
    if !modules.is_empty() {
        join_dump(&mut report, &modules, top);
    }
    let best = report
        .processes
        .into_iter()
        .filter_map(|p| {
            let d = p
                .devices
                .iter()
                .find(|d| i64::from(d.device) == device)?
                .clone();
            let ooms = p
                .ooms
                .into_iter()
                .filter(|o| i64::from(o.device) == device)
                .collect();
            Some(Analysed {
                pid: p.pid,
                executables: p.executables,
                device: d,
                ooms,
                modules: Vec::new(),
            })
        })
        .max_by_key(|a| a.device.peak.as_ref().map_or(0, |p| p.peak_bytes_in_use));
    Ok(Some((
        cap,
        best.map(|mut a| {
            a.modules = modules;
            a
        }),
    )))
}

/// `/api/runs/{id}/runtime?device=&points=&limit=`. None: no such run.
pub async fn device_runtime(
    store: &Store,
    run: i64,
    device: i64,
    points: usize,
    limit: usize,
    top: usize,
) -> Result<Option<RuntimeView>, StoreError> {
    let Some((cap, a)) = analysed(store, run, device, top, true).await? else {
        return Ok(None);
    };
    let mut view = RuntimeView {
        run_id: run,
        device,
        pid: None,
        samples: 0,
        timeline: Vec::new(),
        executions: Vec::new(),
        execution_count: 0,
        executables: Vec::new(),
        peak: None,
        peak_executable: None,
        ooms: Vec::new(),
        xla_modules_attached: 0,
    };
    let Some(a) = a else {
        return Ok(Some(view));
    };
    let names: BTreeMap<u64, &ExecutableSummary> =
        a.executables.iter().map(|x| (x.handle, x)).collect();
    let mut spans: Vec<ExecutionSpan> = Vec::new();
    for e in cap.events.iter().filter(|e| {
        e.pid == a.pid
            && i64::from(e.device) == device
            && e.event_kind() == Some(EventKind::ApiSpan)
    }) {
        match e.api_name() {
            Api::PjrtExecute => spans.push(ExecutionSpan {
                pid: e.pid,
                executable: names
                    .get(&e.ptr)
                    .map_or_else(|| format!("executable {:#x}", e.ptr), |x| x.name.clone()),
                handle: e.ptr,
                start_ns: e.ts_ns,
                end_ns: e.ts_ns + e.duration_ns,
                completed: false,
                result: e.result,
            }),
            Api::PjrtExecuteComplete => {
                if let Some(s) = spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.handle == e.ptr && s.start_ns == e.ts_ns)
                {
                    s.end_ns = s.end_ns.max(e.ts_ns + e.duration_ns);
                    s.completed = true;
                    if s.result == 0 {
                        s.result = e.result;
                    }
                }
            }
            _ => {}
        }
    }
    view.execution_count = spans.len() as u64;
    spans.truncate(limit);
    view.executions = spans;
    view.pid = Some(a.pid);
    view.samples = a.device.samples;
    view.timeline = downsample(&a.device.timeline, points);
    view.peak_executable = a.device.peak.as_ref().and_then(|p| {
        let main = main_handle(p)?;
        names.get(&main).map(|x| (*x).clone())
    });
    view.peak = a.device.peak;
    view.ooms = a.ooms;
    view.executables = a.executables;
    view.xla_modules_attached = a.modules.len() as u64;
    Ok(Some(view))
}

/// The handle of the main executable at the peak (the analysis names it by name only).
fn main_handle(p: &PeakAttribution) -> Option<u64> {
    p.running
        .iter()
        .max_by_key(|r| (r.temp_bytes.unwrap_or(0), r.start_ns))
        .map(|r| r.handle)
}

/// At most `points` samples; each bucket keeps its sample with the most bytes in use.
fn downsample(s: &[Sample], points: usize) -> Vec<Sample> {
    if points == 0 || s.len() <= points {
        return s.to_vec();
    }
    let per = s.len().div_ceil(points);
    s.chunks(per)
        .filter_map(|c| {
            c.iter()
                .max_by_key(|x| (x.peak_bytes_in_use.unwrap_or(0), x.bytes_in_use))
                .cloned()
        })
        .collect()
}

/// The runtime attribution of `device`'s peak, or None when the run has no PJRT
/// memory statistics for it.
pub async fn peak_runtime(
    store: &Store,
    run: i64,
    device: i64,
    top: usize,
) -> Result<Option<PeakRuntime>, StoreError> {
    let Some((cap, a)) = analysed(store, run, device, top, false).await? else {
        return Ok(None);
    };
    let Some((a, p)) = a.and_then(|a| a.device.peak.clone().map(|p| (a, p))) else {
        return driver_peak(store, run, device, &cap, top).await;
    };
    let exe = |h: u64| a.executables.iter().find(|x| x.handle == h);
    let module_of = |x: &ExecutableSummary| {
        find_module(x, &a.modules).map_or_else(|| x.name.clone(), |(m, _)| m.name.clone())
    };
    let main = main_handle(&p).and_then(exe);
    let mut shares: Vec<ModuleShare> = Vec::new();
    if let Some(m) = main {
        if p.running_temp_bytes > 0 {
            shares.push(ModuleShare {
                module: module_of(m),
                executable: m.name.clone(),
                role: "temp".into(),
                bytes: p.running_temp_bytes,
            });
        }
    }
    for g in &p.co_resident {
        let producer = a.executables.iter().find(|x| x.name == g.producer);
        shares.push(ModuleShare {
            module: producer.map_or_else(|| g.producer.clone(), module_of),
            executable: g.producer.clone(),
            role: "live buffers".into(),
            bytes: g.bytes,
        });
    }
    shares.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.module.cmp(&y.module)));
    let largest_free = cap
        .stats
        .iter()
        .find(|s| s.pid == a.pid && i64::from(s.device) == device && s.ts_ns == p.ts_ns)
        .and_then(|s| s.get(PjrtMemoryStats::LARGEST_FREE_BLOCK, s.largest_free_block));
    let (by_hlo_op, by_hlo_category, hlo_buffers, xla_module, matched_by) = match &p.xla {
        Some(j) => (
            j.by_op_name.clone(),
            j.by_category.clone(),
            j.peak_buffers.clone(),
            Some(j.module.clone()),
            Some(j.matched_by.clone()),
        ),
        None => (Vec::new(), Vec::new(), Vec::new(), None, None),
    };
    Ok(Some(PeakRuntime {
        basis: "allocator statistics".into(),
        pid: a.pid,
        ts_ns: p.ts_ns,
        peak_bytes_in_use: p.peak_bytes_in_use,
        pool_bytes: p.pool_bytes,
        bytes_limit: p.bytes_limit,
        largest_free_block_bytes: largest_free,
        executable: p.executable.clone(),
        executable_stats: main.cloned(),
        running: p.running.iter().map(|r| r.executable.clone()).collect(),
        live_buffer_bytes: p.live_buffer_bytes,
        running_temp_bytes: p.running_temp_bytes,
        explained_bytes: p.explained_bytes,
        unexplained_bytes: p.unexplained_bytes,
        co_resident: p.co_resident.clone(),
        by_xla_module: shares,
        by_hlo_op,
        by_hlo_category,
        hlo_buffers,
        xla_module,
        matched_by,
        xla_modules_attached: a.modules.len() as u64,
    }))
}

/// The attribution at the driver-level peak when the run has PJRT executions but no
/// allocator statistics for `device`: the execution(s) running at the peak instant (else
/// the last one started before it), the PJRT buffers live then by producer, and the
/// running executable's module of an attached dump (found by `find_module`).
async fn driver_peak(
    store: &Store,
    run: i64,
    device: i64,
    cap: &RuntimeCapture,
    top: usize,
) -> Result<Option<PeakRuntime>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT peak_bytes, peak_ts_ns FROM peak_snapshots WHERE run_id = $1 AND device = $2",
    )
    .bind(run)
    .bind(device)
    .fetch_optional(&store.pool)
    .await?
    else {
        return Ok(None);
    };
    let peak_bytes = col_i64(&row, 0)?.max(0) as u64;
    let ts = rel(col_i64(&row, 1)?, cap.origin_ns);
    // Execute spans on the device, extended to their completion.
    let mut spans: Vec<(u32, u64, u64, u64)> = Vec::new();
    for e in cap.events.iter().filter(|e| i64::from(e.device) == device) {
        match e.api_name() {
            Api::PjrtExecute => spans.push((e.pid, e.ptr, e.ts_ns, e.ts_ns + e.duration_ns)),
            Api::PjrtExecuteComplete => {
                if let Some(s) = spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.1 == e.ptr && s.2 == e.ts_ns)
                {
                    s.3 = s.3.max(e.ts_ns + e.duration_ns);
                }
            }
            _ => {}
        }
    }
    if spans.is_empty() {
        return Ok(None);
    }
    let mut running: Vec<(u32, u64)> = spans
        .iter()
        .filter(|s| s.2 <= ts && s.3 >= ts)
        .map(|s| (s.0, s.1))
        .collect();
    if running.is_empty() {
        if let Some(s) = spans.iter().rev().find(|s| s.2 <= ts) {
            running.push((s.0, s.1));
        }
    }
    let report = analyse(cap, false);
    let exes: Vec<&ExecutableSummary> = report
        .processes
        .iter()
        .flat_map(|p| p.executables.iter())
        .collect();
    let exe = |pid: u32, h: u64| exes.iter().find(|x| x.pid == pid && x.handle == h).copied();
    let name = |pid: u32, h: u64| {
        exe(pid, h).map_or_else(|| format!("executable {h:#x}"), |x| x.name.clone())
    };
    let main = running
        .iter()
        .max_by_key(|(pid, h)| exe(*pid, *h).and_then(|x| x.temp_bytes).unwrap_or(0))
        .copied();
    let pid = main.map_or(0, |m| m.0);
    let main_exe = main.and_then(|(p, h)| exe(p, h));
    // PJRT buffers live at the peak instant, by producer.
    let rows = sqlx::query(
        "SELECT pid, api, producer, SUM(size), COUNT(*) FROM pjrt_buffers WHERE run_id = $1 \
         AND device = $2 AND ts_ns <= $3 AND (freed_ts_ns IS NULL OR freed_ts_ns > $3) \
         GROUP BY pid, api, producer",
    )
    .bind(run)
    .bind(device)
    .bind((ts + cap.origin_ns) as i64)
    .fetch_all(&store.pool)
    .await?;
    let mut groups: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for r in &rows {
        let (p, api, producer) = (col_i64(r, 0)? as u32, col_i64(r, 1)?, col_i64(r, 2)? as u64);
        let who = match Api::from_u16(api as u16) {
            Api::PjrtExecuteOutput => name(p, producer),
            Api::PjrtBufferFromHostBuffer => "host transfer".into(),
            _ => "device copy".into(),
        };
        let g = groups.entry(who).or_default();
        g.0 += col_i64(r, 3)?.max(0) as u64;
        g.1 += col_i64(r, 4)?.max(0) as u64;
    }
    let mut co_resident: Vec<LiveGroup> = groups
        .into_iter()
        .map(|(producer, (bytes, count))| LiveGroup {
            producer,
            bytes,
            count,
        })
        .collect();
    co_resident.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.producer.cmp(&b.producer)));
    let live: u64 = co_resident.iter().map(|g| g.bytes).sum();
    let temp = main_exe.and_then(|x| x.temp_bytes).unwrap_or(0);
    let explained = (live + temp).min(peak_bytes);
    let modules = modules(store, run).await?;
    let module_of = |x: &ExecutableSummary| {
        find_module(x, &modules).map_or_else(|| x.name.clone(), |(m, _)| m.name.clone())
    };
    let mut shares: Vec<ModuleShare> = Vec::new();
    if let (Some(m), true) = (main_exe, temp > 0) {
        shares.push(ModuleShare {
            module: module_of(m),
            executable: m.name.clone(),
            role: "temp".into(),
            bytes: temp,
        });
    }
    for g in &co_resident {
        let producer = exes.iter().find(|x| x.name == g.producer);
        shares.push(ModuleShare {
            module: producer.map_or_else(|| g.producer.clone(), |x| module_of(x)),
            executable: g.producer.clone(),
            role: "live buffers".into(),
            bytes: g.bytes,
        });
    }
    shares.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.module.cmp(&y.module)));
    let joined = main_exe.and_then(|x| find_module(x, &modules));
    Ok(Some(PeakRuntime {
        basis: "driver peak".into(),
        pid,
        ts_ns: ts,
        peak_bytes_in_use: peak_bytes,
        pool_bytes: None,
        bytes_limit: None,
        largest_free_block_bytes: None,
        executable: main_exe.map(|x| x.name.clone()),
        executable_stats: main_exe.cloned(),
        running: running.iter().map(|(p, h)| name(*p, *h)).collect(),
        live_buffer_bytes: live,
        running_temp_bytes: temp,
        explained_bytes: explained,
        unexplained_bytes: peak_bytes - explained,
        co_resident,
        by_xla_module: shares,
        by_hlo_op: joined.map_or_else(Vec::new, |(m, _)| {
            m.by_op_name.iter().take(top).cloned().collect()
        }),
        by_hlo_category: joined.map_or_else(Vec::new, |(m, _)| m.by_category.clone()),
        hlo_buffers: joined.map_or_else(Vec::new, |(m, _)| {
            m.peak_buffers.iter().take(top).cloned().collect()
        }),
        xla_module: joined.map(|(m, _)| m.name.clone()),
        matched_by: joined.map(|(_, how)| how.to_string()),
        xla_modules_attached: modules.len() as u64,
    }))
}
