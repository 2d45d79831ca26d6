//! Ingest of the PJRT wrapper's records, inside the commit's transaction: executables
//! with their compiled memory statistics, the framework allocator's memory-statistics
//! samples, and from the events: compiles and loads (`pjrt_compiles`), executions (call
//! and device-side completion per device), PJRT buffers (created/freed), and an incident
//! for every execute that failed
//! (synchronously, through its completion event, or through an output buffer's ready
//! event). The `runtime` feature reads these tables back.

use std::collections::{HashMap, HashSet};

use memwatch_analysis::runtime::OutputOrder;
use memwatch_wire::{Api, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats};
use sqlx::any::AnyArguments;
use sqlx::Any;

use super::pool_samples::{Lookup, PoolSamples};
use super::write::{group_len, push_values};
use super::Tx;
use crate::codes;
use crate::db::{now_unix_ns, Backend, StoreError};

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

/// One execution row not yet written.
struct ExecRow {
    run: i64,
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
    run: i64,
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

/// One incident row (a failed execute) not yet written.
struct IncidentRow {
    run: i64,
    event: Event,
    live: i64,
    created: i64,
}

/// Rows held before they are written (see [`Pending::write`]).
const PENDING_ROWS: usize = 1 << 16;

/// The PJRT rows of a commit not yet written: executions, buffers, allocator samples and
/// failed executes, each table's rows in arrival order (so ids are what writing each
/// row at once would give), written in a few multi-row statements (each statement is a
/// round trip to the database). A completion or free of a row still held is applied to
/// it; those of rows written before are held too and written first, as multi-row
/// UPDATEs, with what one UPDATE each at its time would store: a free ends every
/// buffer of its pointer not yet freed (a second free of the pointer finds none), a
/// completion overwrites its execution's (the last one stays).
pub(super) struct Pending {
    backend: Backend,
    execs: Vec<ExecRow>,
    exec_at: HashMap<(i64, i64, i64, i64, i64), usize>,
    bufs: Vec<BufRow>,
    live_at: HashMap<(i64, i64, i64), usize>,
    stats: Vec<(i64, PjrtMemoryStats)>,
    incidents: Vec<IncidentRow>,
    /// Frees of buffers written before: run, pid, ptr, time; the first of each pointer.
    frees: Vec<[i64; 4]>,
    freed: HashSet<(i64, i64, i64)>,
    /// Completions of executions written before: run, pid, handle, device, start, end,
    /// result, requested bytes; the last of each execution.
    completes: Vec<[i64; 8]>,
    complete_at: HashMap<[i64; 5], usize>,
}

impl Pending {
    pub(super) fn new(backend: Backend) -> Self {
        Self {
            backend,
            execs: Vec::new(),
            exec_at: HashMap::new(),
            bufs: Vec::new(),
            live_at: HashMap::new(),
            stats: Vec::new(),
            incidents: Vec::new(),
            frees: Vec::new(),
            freed: HashSet::new(),
            completes: Vec::new(),
            complete_at: HashMap::new(),
        }
    }

    fn rows(&self) -> usize {
        self.execs.len()
            + self.bufs.len()
            + self.stats.len()
            + self.incidents.len()
            + self.frees.len()
            + self.completes.len()
    }

    /// A `pjrt_memory_stats` record of run `run`; `pool` learns its bytes in use.
    pub(super) async fn memory_stats(
        &mut self,
        tx: &mut Tx,
        run: i64,
        s: &PjrtMemoryStats,
        pool: &mut PoolSamples,
    ) -> Result<(), StoreError> {
        pool.record(
            s.pid as i64,
            s.device as i64,
            s.ts_ns as i64,
            s.bytes_in_use,
        );
        self.stats.push((run, *s));
        self.write_if_full(tx).await
    }

    /// The PJRT events among `events` of run `run` (the rest are left to the event
    /// chunks, which hold every event anyway): executions, completions, buffers, failed
    /// executes. Execute outputs are numbered by `outputs`, the run's [`OutputOrder`];
    /// a failed execute's live bytes come from `pool`.
    pub(super) async fn events(
        &mut self,
        tx: &mut Tx,
        run: i64,
        events: &[Event],
        outputs: &mut OutputOrder,
        pool: &PoolSamples,
    ) -> Result<(), StoreError> {
        for e in events.iter().filter(|e| codes::is_pjrt(e)) {
            let (pid, device, ptr) = (e.pid as i64, e.device as i64, e.ptr as i64);
            match (codes::api(e.api), codes::event_kind(e.kind)) {
                // Compiles and loads (few): the framework view's compile lane.
                (
                    Api::PjrtClientCompile | Api::PjrtDeserializeAndLoad,
                    Some(EventKind::ApiSpan),
                ) => {
                    sqlx::query(
                        "INSERT INTO pjrt_compiles (run_id, pid, api, handle, ts_ns, \
                         duration_ns, result) VALUES ($1, $2, $3, $4, $5, $6, $7)",
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
                    self.exec_at
                        .insert((run, pid, ptr, device, e.ts_ns as i64), self.execs.len());
                    self.execs.push(ExecRow {
                        run,
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
                        self.incident(tx, run, e, pool).await?;
                    }
                }
                (Api::PjrtExecuteComplete, _) => {
                    let done = (e.duration_ns as i64, e.result as i64, e.size as i64);
                    match self.exec_at.get(&(run, pid, ptr, device, e.ts_ns as i64)) {
                        Some(&i) => self.execs[i].complete = Some(done),
                        None => {
                            let key = [run, pid, ptr, device, e.ts_ns as i64];
                            let row = [
                                key[0], key[1], key[2], key[3], key[4], done.0, done.1, done.2,
                            ];
                            match self.complete_at.get(&key) {
                                Some(&i) => self.completes[i] = row,
                                None => {
                                    self.complete_at.insert(key, self.completes.len());
                                    self.completes.push(row);
                                }
                            }
                        }
                    }
                    if e.result != 0 {
                        self.incident(tx, run, e, pool).await?;
                    }
                }
                (_, Some(EventKind::Alloc))
                    if codes::mem_kind(e.mem_kind) == Some(MemKind::PjrtBuffer) =>
                {
                    self.live_at.insert((run, pid, ptr), self.bufs.len());
                    self.bufs.push(BufRow {
                        run,
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
                (_, Some(EventKind::Free)) => match self.live_at.remove(&(run, pid, ptr)) {
                    Some(i) => self.bufs[i].freed = Some(e.ts_ns as i64),
                    None => {
                        if self.freed.insert((run, pid, ptr)) {
                            self.frees.push([run, pid, ptr, e.ts_ns as i64]);
                        }
                    }
                },
                _ => {}
            }
        }
        self.write_if_full(tx).await
    }

    /// A failed execute becomes an incident; its live bytes are the allocator's bytes in
    /// use of the last memory-statistics sample of that device at or before the
    /// execution's end (0 when none was taken yet), from `pool` or else the database.
    async fn incident(
        &mut self,
        tx: &mut Tx,
        run: i64,
        e: &Event,
        pool: &PoolSamples,
    ) -> Result<(), StoreError> {
        let (pid, device) = (e.pid as i64, e.device as i64);
        let end = e.ts_ns.saturating_add(e.duration_ns) as i64;
        let live = match pool.last_at(pid, device, end) {
            Lookup::Known(b) => b,
            Lookup::Ask => {
                // The samples held back are the database's too.
                self.write(tx).await?;
                sqlx::query_scalar(
                    "SELECT bytes_in_use FROM pjrt_memory_stats WHERE run_id = $1 AND pid = $2 \
                     AND device = $3 AND ts_ns <= $4 ORDER BY ts_ns DESC LIMIT 1",
                )
                .bind(run)
                .bind(pid)
                .bind(device)
                .bind(end)
                .fetch_optional(&mut **tx)
                .await?
            }
        };
        self.incidents.push(IncidentRow {
            run,
            event: *e,
            live: live.unwrap_or(0),
            created: now_unix_ns(),
        });
        Ok(())
    }

    async fn write_if_full(&mut self, tx: &mut Tx) -> Result<(), StoreError> {
        if self.rows() >= PENDING_ROWS {
            self.write(tx).await?;
        }
        Ok(())
    }

    /// Writes everything held: first the completions and frees of rows written before
    /// (so they end no row held here), then the rows.
    pub(super) async fn write(&mut self, tx: &mut Tx) -> Result<(), StoreError> {
        let b = self.backend;
        self.freed.clear();
        self.complete_at.clear();
        let frees = std::mem::take(&mut self.frees);
        write_rows(tx, b, FREE_UPDATE, FREE_WHERE, 4, &frees, bind_all).await?;
        let completes = std::mem::take(&mut self.completes);
        write_rows(
            tx,
            b,
            COMPLETE_UPDATE,
            COMPLETE_WHERE,
            8,
            &completes,
            bind_all,
        )
        .await?;
        self.exec_at.clear();
        self.live_at.clear();
        let stats = std::mem::take(&mut self.stats);
        write_rows(tx, b, STATS_INSERT, "", 13, &stats, |q, (run, s)| {
            q.bind(*run)
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
        })
        .await?;
        let execs = std::mem::take(&mut self.execs);
        write_rows(tx, b, EXEC_INSERT, "", 11, &execs, |q, r| {
            q.bind(r.run)
                .bind(r.pid)
                .bind(r.device)
                .bind(r.handle)
                .bind(r.start)
                .bind(r.call)
                .bind(r.result)
                .bind(r.requested)
                .bind(r.complete.map(|c| c.0))
                .bind(r.complete.map(|c| c.1))
                .bind(r.complete.map(|c| c.2))
        })
        .await?;
        let bufs = std::mem::take(&mut self.bufs);
        write_rows(tx, b, BUF_INSERT, "", 10, &bufs, |q, r| {
            q.bind(r.run)
                .bind(r.pid)
                .bind(r.device)
                .bind(r.ptr)
                .bind(r.size)
                .bind(r.api)
                .bind(r.producer)
                .bind(r.ts)
                .bind(r.freed)
                .bind(r.output_index)
        })
        .await?;
        let incidents = std::mem::take(&mut self.incidents);
        write_rows(tx, b, INCIDENT_INSERT, "", 10, &incidents, |q, r| {
            let e = &r.event;
            q.bind(r.run)
                .bind(e.pid as i64)
                .bind(e.tid as i64)
                .bind(e.device as i64)
                .bind(e.ts_ns as i64)
                .bind(e.size as i64)
                .bind(e.result as i64)
                .bind(codes::api_name(e.api).to_string())
                .bind(r.live)
                .bind(r.created)
        })
        .await
    }
}

const STATS_INSERT: &str = "INSERT INTO pjrt_memory_stats (run_id, pid, device, ts_ns, flags, \
     bytes_in_use, peak_bytes_in_use, largest_free_block, pool_bytes, peak_pool_bytes, \
     bytes_limit, num_allocs, largest_alloc_size) VALUES ";
const EXEC_INSERT: &str = "INSERT INTO pjrt_executions (run_id, pid, device, handle, start_ns, \
     call_ns, result, requested_bytes, complete_ns, complete_result, \
     complete_requested_bytes) VALUES ";
const BUF_INSERT: &str = "INSERT INTO pjrt_buffers (run_id, pid, device, ptr, size, api, \
     producer, ts_ns, freed_ts_ns, output_index) VALUES ";
const INCIDENT_INSERT: &str = "INSERT INTO incidents (run_id, pid, tid, device, ts_ns, size, \
     result, api, live_bytes, created_unix_ns) VALUES ";

/// The frees of buffers written before (run, pid, ptr, time: `v.column1..4`, as SQLite and
/// PostgreSQL name the columns of a VALUES list).
const FREE_UPDATE: &str = "UPDATE pjrt_buffers SET freed_ts_ns = v.column4 FROM (VALUES ";
const FREE_WHERE: &str = ") AS v WHERE pjrt_buffers.run_id = v.column1 \
     AND pjrt_buffers.pid = v.column2 AND pjrt_buffers.ptr = v.column3 \
     AND pjrt_buffers.freed_ts_ns IS NULL";
/// The completions of executions written before (run, pid, handle, device, start; end,
/// result, requested bytes).
const COMPLETE_UPDATE: &str = "UPDATE pjrt_executions SET complete_ns = v.column6, \
     complete_result = v.column7, complete_requested_bytes = v.column8 FROM (VALUES ";
const COMPLETE_WHERE: &str = ") AS v WHERE pjrt_executions.run_id = v.column1 \
     AND pjrt_executions.pid = v.column2 AND pjrt_executions.handle = v.column3 \
     AND pjrt_executions.device = v.column4 AND pjrt_executions.start_ns = v.column5";

/// Rows per multi-row statement of these tables: at most 13 parameters a row, under
/// SQLite's 32,766 and PostgreSQL's 65,535 per statement.
const ROWS_PER_STATEMENT: usize = 1024;

type Query<'q> = sqlx::query::Query<'q, Any, AnyArguments<'q>>;

fn bind_all<'q, const N: usize>(mut q: Query<'q>, row: &[i64; N]) -> Query<'q> {
    for v in row {
        q = q.bind(*v);
    }
    q
}

/// Writes `rows` in order: `head`, `cols` values a row, `tail`, in statements of
/// power-of-two sizes (each shape prepared once per connection).
async fn write_rows<'r, T>(
    tx: &mut Tx,
    backend: Backend,
    head: &str,
    tail: &str,
    cols: usize,
    rows: &'r [T],
    bind: impl for<'q> Fn(Query<'q>, &'r T) -> Query<'q>,
) -> Result<(), StoreError> {
    let mut rest = rows;
    while !rest.is_empty() {
        let (group, after) = rest.split_at(group_len(rest.len(), ROWS_PER_STATEMENT));
        rest = after;
        let mut sql = String::from(head);
        push_values(&mut sql, backend, group.len(), cols);
        sql.push_str(tail);
        let mut q = sqlx::query(&sql);
        for r in group {
            q = bind(q, r);
        }
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
