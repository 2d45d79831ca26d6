//! Ingest: turns batches of wire records into rows, one transaction per group of batches.
//!
//! Owns idempotency (a batch whose (node, stream, seq) was committed before is
//! acknowledged and skipped), run creation, and writing chunks, rollups, peaks,
//! processes, devices, samples, annotations and incidents. The [`Ingestor`] is used by
//! exactly one task (the daemon's writer, or `memwatch import --db`); after a failed
//! transaction it forgets its in-memory state and rebuilds it from the database.

use std::collections::{HashMap, HashSet};

use memwatch_wire::frame::decode_event;
use memwatch_wire::{Api, Event, Record, Vendor, EVENT_SIZE};
use sqlx::{Any, Row, Transaction};

use super::rollup::RollupRow;
use super::state::{Chunk, RunState};
use super::{col_i64, now_unix_ns, snapshot, Backend, Store, StoreError};

/// Run key used when a batch carries events but no run key.
pub const DEFAULT_RUN_KEY: &str = "unnamed";

/// One unit of ingest: whole wire records from one (node, stream), numbered by `seq`.
/// `seq` 0 means "not numbered" (no idempotency; HTTP uploads without a sequence).
#[derive(Debug, Clone)]
pub struct Batch {
    pub node: String,
    pub stream: u64,
    pub seq: u64,
    pub run_key: String,
    pub records: Vec<Record>,
}

/// What happened to one batch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BatchOutcome {
    pub stream: u64,
    pub seq: u64,
    /// Already committed earlier: acknowledged, not stored again.
    pub duplicate: bool,
    pub events: u64,
    /// The run the batch's events went to, if any.
    pub run_id: Option<i64>,
}

/// Rows per multi-row rollup upsert: 7 parameters each, well under SQLite's 32,766 and
/// PostgreSQL's 65,535 bind parameters per statement.
const ROLLUP_ROWS_PER_INSERT: usize = 2048;

/// Appends `rows` parenthesised groups of `cols` placeholders. SQLite gets anonymous `?`
/// (sqlx looks each numbered parameter's name up in a list, which makes a statement with
/// thousands of `$N` quadratic); PostgreSQL needs `$N`.
fn push_values(sql: &mut String, backend: Backend, rows: usize, cols: usize) {
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

/// The single writer. See the module docs.
pub struct Ingestor {
    store: Store,
    nodes: HashMap<String, i64>,
    streams: HashMap<(i64, u64), u64>,
    run_ids: HashMap<(i64, String), i64>,
    runs: HashMap<i64, RunState>,
}

type Tx = Transaction<'static, Any>;

impl Ingestor {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            nodes: HashMap::new(),
            streams: HashMap::new(),
            run_ids: HashMap::new(),
            runs: HashMap::new(),
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Current live bytes per (run, device) of the runs held in memory.
    pub fn live_bytes(&self) -> Vec<(i64, i32, i64)> {
        self.runs
            .values()
            .flat_map(|r| r.devices.iter().map(|(d, s)| (r.run_id, *d, s.live_bytes)))
            .collect()
    }

    fn reset(&mut self) {
        self.nodes.clear();
        self.streams.clear();
        self.run_ids.clear();
        self.runs.clear();
    }

    /// Stores `batches` in one transaction; outcomes in the same order. Acknowledge a
    /// batch only after this returned `Ok`.
    pub async fn commit(&mut self, batches: Vec<Batch>) -> Result<Vec<BatchOutcome>, StoreError> {
        let mut tx = self.store.pool.begin().await?;
        match self.commit_in(&mut tx, batches).await {
            Ok((outcomes, streams)) => match tx.commit().await {
                Ok(()) => {
                    self.streams.extend(streams);
                    Ok(outcomes)
                }
                Err(e) => {
                    self.reset();
                    Err(e.into())
                }
            },
            Err(e) => {
                self.reset();
                Err(e)
            }
        }
    }

    async fn commit_in(
        &mut self,
        tx: &mut Tx,
        batches: Vec<Batch>,
    ) -> Result<(Vec<BatchOutcome>, HashMap<(i64, u64), u64>), StoreError> {
        let now = now_unix_ns();
        let mut pending: HashMap<(i64, u64), u64> = HashMap::new();
        let mut outcomes = Vec::with_capacity(batches.len());
        let mut touched: HashSet<i64> = HashSet::new();
        // Events to apply, in arrival order; applied after the other records (whose rows
        // do not depend on them) so that applying overlaps writing (`apply_and_write`).
        let mut work: Vec<(i64, &[Event])> = Vec::new();
        for b in &batches {
            let node_id = self.node_id(tx, &b.node, now).await?;
            if b.seq != 0 {
                let last = match pending.get(&(node_id, b.stream)) {
                    Some(s) => *s,
                    None => self.stream_last(tx, node_id, b.stream).await?,
                };
                if b.seq <= last {
                    outcomes.push(BatchOutcome {
                        stream: b.stream,
                        seq: b.seq,
                        duplicate: true,
                        events: 0,
                        run_id: None,
                    });
                    continue;
                }
            }
            let key = if b.run_key.is_empty() {
                DEFAULT_RUN_KEY
            } else {
                &b.run_key
            };
            let mut events = 0u64;
            let mut run_id = None;
            for rec in &b.records {
                match rec {
                    Record::ProcessStart(p) => {
                        let r = self
                            .run_for(
                                tx,
                                node_id,
                                key,
                                p.mono_anchor_ns,
                                p.wall_anchor_unix_ns,
                                now,
                            )
                            .await?;
                        run_id = Some(r);
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
                    }
                    Record::Events(evs) => {
                        let Some(first) = evs.first() else { continue };
                        let r = self.run_for(tx, node_id, key, first.ts_ns, 0, now).await?;
                        run_id = Some(r);
                        touched.insert(r);
                        work.push((r, evs.as_slice()));
                        events += evs.len() as u64;
                        super::pjrt::store_events(tx, r, evs).await?;
                    }
                    Record::DeviceInfo(d) => {
                        sqlx::query(
                            "INSERT INTO devices (node_id, ordinal, vendor, name, total_bytes) \
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (node_id, ordinal) DO UPDATE \
                             SET vendor = excluded.vendor, name = excluded.name, \
                             total_bytes = excluded.total_bytes",
                        )
                        .bind(node_id)
                        .bind(d.device as i64)
                        .bind(Vendor::from_u8(d.vendor).name().to_string())
                        .bind(d.name.clone())
                        .bind(d.total_bytes as i64)
                        .execute(&mut **tx)
                        .await?;
                    }
                    Record::Marker(m) => {
                        let r = self.run_for(tx, node_id, key, m.ts_ns, 0, now).await?;
                        run_id = Some(r);
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
                    }
                    Record::Dropped(d) => {
                        let r = self.run_for(tx, node_id, key, d.ts_ns, 0, now).await?;
                        run_id = Some(r);
                        touched.insert(r);
                        if let Some(st) = self.runs.get_mut(&r) {
                            st.dropped.insert(d.pid, d.dropped_total);
                            st.dirty = true;
                        }
                        sqlx::query(
                            "UPDATE processes SET dropped_events = $1 WHERE run_id = $2 AND pid = $3",
                        )
                        .bind(d.dropped_total as i64)
                        .bind(r)
                        .bind(d.pid as i64)
                        .execute(&mut **tx)
                        .await?;
                    }
                    Record::ProcessEnd(pe) => {
                        let r = self.run_for(tx, node_id, key, pe.ts_ns, 0, now).await?;
                        run_id = Some(r);
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
                    }
                    Record::DeviceSample(s) => {
                        sqlx::query(
                            "INSERT INTO device_samples (node_id, device, memory, ts_ns, \
                             used_bytes, total_bytes, source, received_unix_ns) \
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                        )
                        .bind(node_id)
                        .bind(s.device as i64)
                        .bind(s.memory as i64)
                        .bind(s.ts_ns as i64)
                        .bind(s.used_bytes as i64)
                        .bind(s.total_bytes as i64)
                        .bind(s.source.clone())
                        .bind(now)
                        .execute(&mut **tx)
                        .await?;
                    }
                    // PJRT executable / allocator-statistics frames (issue 9): store::pjrt.
                    Record::PjrtExecutable(x) => {
                        let r = self.run_for(tx, node_id, key, x.ts_ns, 0, now).await?;
                        run_id = Some(r);
                        super::pjrt::store_executable(tx, r, x).await?;
                    }
                    Record::PjrtMemoryStats(s) => {
                        let r = self.run_for(tx, node_id, key, s.ts_ns, 0, now).await?;
                        run_id = Some(r);
                        super::pjrt::store_memory_stats(tx, r, s).await?;
                    }
                    // Sampled native stacks: read by `memwatch report` from the capture file.
                    Record::Backtrace(_) | Record::ModuleMap(_) => {}
                    Record::Unknown { .. } => {}
                }
            }
            if b.seq != 0 {
                sqlx::query(
                    "INSERT INTO streams (node_id, stream_id, last_seq) VALUES ($1, $2, $3) \
                     ON CONFLICT (node_id, stream_id) DO UPDATE SET last_seq = excluded.last_seq",
                )
                .bind(node_id)
                .bind(b.stream as i64)
                .bind(b.seq as i64)
                .execute(&mut **tx)
                .await?;
                pending.insert((node_id, b.stream), b.seq);
            }
            outcomes.push(BatchOutcome {
                stream: b.stream,
                seq: b.seq,
                duplicate: false,
                events,
                run_id,
            });
        }
        self.apply_and_write(tx, &work, now).await?;
        for r in touched {
            self.flush_run(tx, r, now).await?;
        }
        Ok((outcomes, pending))
    }

    async fn node_id(&mut self, tx: &mut Tx, name: &str, now: i64) -> Result<i64, StoreError> {
        if let Some(id) = self.nodes.get(name) {
            return Ok(*id);
        }
        let row = sqlx::query(
            "INSERT INTO nodes (name, first_seen_unix_ns, last_seen_unix_ns) VALUES ($1, $2, $2) \
             ON CONFLICT (name) DO UPDATE SET last_seen_unix_ns = excluded.last_seen_unix_ns \
             RETURNING id",
        )
        .bind(name.to_string())
        .bind(now)
        .fetch_one(&mut **tx)
        .await?;
        let id = col_i64(&row, 0)?;
        self.nodes.insert(name.to_string(), id);
        Ok(id)
    }

    async fn stream_last(
        &mut self,
        tx: &mut Tx,
        node: i64,
        stream: u64,
    ) -> Result<u64, StoreError> {
        if let Some(s) = self.streams.get(&(node, stream)) {
            return Ok(*s);
        }
        let row = sqlx::query("SELECT last_seq FROM streams WHERE node_id = $1 AND stream_id = $2")
            .bind(node)
            .bind(stream as i64)
            .fetch_optional(&mut **tx)
            .await?;
        let last = match row {
            Some(r) => col_i64(&r, 0)? as u64,
            None => 0,
        };
        self.streams.insert((node, stream), last);
        Ok(last)
    }

    /// The run `(node, key)`, created with `t0` when new; loaded into memory (rebuilt from
    /// its stored chunks) when not held.
    async fn run_for(
        &mut self,
        tx: &mut Tx,
        node: i64,
        key: &str,
        t0: u64,
        wall: u64,
        now: i64,
    ) -> Result<i64, StoreError> {
        if let Some(id) = self.run_ids.get(&(node, key.to_string())) {
            if self.runs.contains_key(id) {
                return Ok(*id);
            }
        }
        let row =
            sqlx::query("SELECT id, t0_mono_ns FROM runs WHERE node_id = $1 AND run_key = $2")
                .bind(node)
                .bind(key.to_string())
                .fetch_optional(&mut **tx)
                .await?;
        let id = match row {
            Some(r) => {
                let id = col_i64(&r, 0)?;
                let t0 = col_i64(&r, 1)? as u64;
                let st = self.rebuild(tx, id, t0).await?;
                self.runs.insert(id, st);
                id
            }
            None => {
                let r = sqlx::query(
                    "INSERT INTO runs (node_id, run_key, t0_mono_ns, wall_anchor_unix_ns, \
                     created_unix_ns, last_ts_ns, event_count, dropped_events) \
                     VALUES ($1, $2, $3, $4, $5, $3, 0, 0) RETURNING id",
                )
                .bind(node)
                .bind(key.to_string())
                .bind(t0 as i64)
                .bind(wall as i64)
                .bind(now)
                .fetch_one(&mut **tx)
                .await?;
                let id = col_i64(&r, 0)?;
                self.runs.insert(id, RunState::new(id, t0));
                id
            }
        };
        self.run_ids.insert((node, key.to_string()), id);
        Ok(id)
    }

    /// Replays a run's stored chunks (in commit order) to recover its live state.
    async fn rebuild(&mut self, tx: &mut Tx, run: i64, t0: u64) -> Result<RunState, StoreError> {
        let mut st = RunState::new(run, t0);
        let mut after = 0i64;
        loop {
            let rows = sqlx::query(
                "SELECT id, events FROM event_chunks WHERE run_id = $1 AND id > $2 ORDER BY id LIMIT 64",
            )
            .bind(run)
            .bind(after)
            .fetch_all(&mut **tx)
            .await?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                after = col_i64(row, 0)?;
                let blob: Vec<u8> = row.try_get(1)?;
                if !blob.len().is_multiple_of(EVENT_SIZE) {
                    return Err(StoreError::Corrupt(format!(
                        "event chunk {after} holds {} bytes, not whole events",
                        blob.len()
                    )));
                }
                for c in blob.chunks_exact(EVENT_SIZE) {
                    let mut slot = [0u8; EVENT_SIZE];
                    slot.copy_from_slice(c);
                    st.apply(&decode_event(&slot), false);
                }
            }
        }
        let rows = sqlx::query("SELECT pid, dropped_events FROM processes WHERE run_id = $1")
            .bind(run)
            .fetch_all(&mut **tx)
            .await?;
        for r in &rows {
            st.dropped
                .insert(col_i64(r, 0)? as u32, col_i64(r, 1)? as u64);
        }
        for d in st.devices.values_mut() {
            d.dirty = false;
        }
        st.dirty = false;
        Ok(st)
    }

    /// Applies `work` in slices; while one slice is applied (CPU, this task), the chunks
    /// and rollups finished by the previous slice are written (the database works on its
    /// own thread or process), so the two overlap. Same rows, same order per device as
    /// writing everything at the end; all in the caller's transaction.
    async fn apply_and_write(
        &mut self,
        tx: &mut Tx,
        work: &[(i64, &[Event])],
        now: i64,
    ) -> Result<(), StoreError> {
        let backend = self.store.backend;
        let (mut wi, mut ei) = (0usize, 0usize);
        let mut ready: Ready = (Vec::new(), Vec::new());
        loop {
            let runs = &mut self.runs;
            let write = write_ready(tx, backend, std::mem::take(&mut ready), now);
            let apply = async {
                let mut n = 0usize;
                let mut seen: HashSet<i64> = HashSet::new();
                while wi < work.len() && n < APPLY_SLICE {
                    let (r, evs) = work[wi];
                    let st = runs.get_mut(&r).ok_or_else(|| {
                        StoreError::Corrupt(format!("run {r} vanished from memory"))
                    })?;
                    seen.insert(r);
                    let end = evs.len().min(ei + (APPLY_SLICE - n)).min(ei + 8192);
                    for e in &evs[ei..end] {
                        st.apply(e, true);
                    }
                    n += end - ei;
                    ei = end;
                    if ei == evs.len() {
                        wi += 1;
                        ei = 0;
                    }
                    // Lets the pending write submit its next statement.
                    tokio::task::yield_now().await;
                }
                Ok::<_, StoreError>(take_ready(runs, &seen))
            };
            let (w, a) = tokio::join!(write, apply);
            w?;
            ready = a?;
            if ready.0.is_empty() && ready.1.is_empty() && wi >= work.len() {
                return Ok(());
            }
        }
    }

    async fn flush_run(&mut self, tx: &mut Tx, run: i64, now: i64) -> Result<(), StoreError> {
        let backend = self.store.backend;
        let Some(st) = self.runs.get_mut(&run) else {
            return Ok(());
        };
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
        let mut snaps: Vec<(i32, i64, i64, Vec<u8>)> = Vec::new();
        for dev in devices {
            let snap = st.take_peak_snapshot(dev);
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
            if let Some(allocs) = snap {
                snaps.push((
                    dev,
                    d.peak_bytes,
                    d.peak_ts as i64,
                    snapshot::encode(&allocs),
                ));
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
        for (dev, peak_bytes, peak_ts, blob) in snaps {
            sqlx::query(
                "INSERT INTO peak_snapshots (run_id, device, peak_bytes, peak_ts_ns, allocs) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (run_id, device) DO UPDATE SET \
                 peak_bytes = excluded.peak_bytes, peak_ts_ns = excluded.peak_ts_ns, \
                 allocs = excluded.allocs",
            )
            .bind(run)
            .bind(dev as i64)
            .bind(peak_bytes)
            .bind(peak_ts)
            .bind(blob)
            .execute(&mut **tx)
            .await?;
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
            .bind(Api::from_u16(e.api).name().to_string())
            .bind(inc.live_bytes)
            .bind(now)
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
}

/// A finished event chunk of one (run, device).
type ChunkRow = (i64, i32, Chunk);
/// A rollup row of one (run, device).
type RollRow = (i64, i32, RollupRow);

/// Chunks per multi-row insert (12 parameters each; up to ~4.5 MiB of blobs).
const CHUNK_ROWS_PER_INSERT: usize = 8;

/// Power-of-two statement sizes up to `max`: at most a few statement shapes, each
/// prepared once per connection and then reused from sqlx's cache.
fn group_len(rest: usize, max: usize) -> usize {
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
type Ready = (Vec<ChunkRow>, Vec<RollRow>);

/// Events applied per slice of [`Ingestor::apply_and_write`].
const APPLY_SLICE: usize = 1 << 18;

/// Takes the finished chunks and closed rollups of `runs` out of their state.
fn take_ready(runs: &mut HashMap<i64, RunState>, which: &HashSet<i64>) -> Ready {
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

async fn write_ready(
    tx: &mut Tx,
    backend: Backend,
    ready: Ready,
    now: i64,
) -> Result<(), StoreError> {
    let (chunks, rollups) = ready;
    insert_chunks(tx, backend, chunks, now).await?;
    upsert_rollups(tx, backend, &rollups).await
}
