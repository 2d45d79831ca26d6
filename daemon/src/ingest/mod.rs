//! Ingest: turns batches of wire records into rows, one transaction per group of batches.
//!
//! Owns idempotency (a batch whose (node, stream, seq) was committed before is
//! acknowledged and skipped; one that does not follow the stream's stored batches is
//! refused: `sequence`), retrying a commit the database refused for now (another writer
//! holds its lock), run creation, and the commit of each record kind:
//! `records` (process start/end, dropped counters, device info and samples, markers),
//! `pjrt` (PJRT executables, executions, buffers, allocator samples), and the events,
//! applied to each run's in-memory state (`run_state`, live bytes, peaks, `rollup`
//! buckets, event chunks) and written by `write`. The agents' TCP listener (`tcp`), the
//! HTTP ingest endpoints (`http`) and the single writer task (`writer`) feed it, within
//! the memory budget of received data (`budget`). The [`Ingestor`] is used by exactly one
//! task (the daemon's writer, or `memwatch import --db`); after a failed transaction it
//! forgets its in-memory state and rebuilds it from the database. A run's in-memory state
//! is given back once the run is finished (every process ended) and quiet for
//! [`RunEviction::finished`], or quiet for [`RunEviction::idle`]; a batch for it later
//! rebuilds it from its stored chunks.

pub mod budget;
pub(crate) mod conns;
mod devices;
pub(crate) mod http;
mod peak_rows;
pub mod peer;
mod pjrt;
mod pool_samples;
mod rebuild;
mod records;
pub mod rollup;
mod run_state;
mod sequence;
#[cfg(target_os = "linux")]
mod sock_diag;
pub(crate) mod tcp;
mod write;
mod writer;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use memwatch_wire::{Event, Record};
use sqlx::{Any, Transaction};

pub use budget::{Budget, IngestLimits};
pub use peer::Peer;
pub use sequence::Sequencing;
pub(crate) use tcp::serve_ingest;
pub use tcp::TcpConfig;
pub use writer::{spawn_writer, tune_allocator, NotStored, Reply, WriterHandle};

use crate::db::{now_unix_ns, Store, StoreError};
use run_state::RunState;
use sequence::{verdict, FailedStreams, Verdict};
use write::{flush_run, take_ready, write_ready, Ready, APPLY_SLICE};

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
    /// Not stored and not to be acknowledged: why, and where to resend from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl BatchOutcome {
    fn skipped(b: &Batch, refused: Option<String>) -> Self {
        Self {
            stream: b.stream,
            seq: b.seq,
            duplicate: refused.is_none(),
            events: 0,
            run_id: None,
            refused,
        }
    }
}

/// How long a commit the database refuses because another connection or process holds
/// its lock is retried (each try waits up to the pool's busy timeout first).
pub const DEFAULT_BUSY_RETRY: Duration = Duration::from_secs(60);

/// The single writer. See the module docs.
pub struct Ingestor {
    store: Store,
    nodes: HashMap<String, i64>,
    /// Last stored batch of each (node, stream) read so far; `None`: none stored.
    streams: HashMap<(i64, u64), Option<u64>>,
    run_ids: HashMap<(i64, String), i64>,
    runs: HashMap<i64, RunState>,
    /// The devices rows readings and samples go to.
    device_rows: devices::RowCache,
    failed: FailedStreams,
    busy_retry: Duration,
    eviction: RunEviction,
    last_eviction: Instant,
}

/// When a run's in-memory state (its live allocations, open rollup buckets) is given
/// back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEviction {
    /// Every process of the run ended, and no batch came for this long.
    pub finished: Duration,
    /// No batch came for this long (a later batch pays for replaying the run's chunks).
    pub idle: Duration,
    /// At most this many runs are held; over it, the runs quiet the longest leave
    /// memory at once until a quarter of the room is free again (a client that opens
    /// runs without end cannot grow the writer's memory).
    pub max_runs: usize,
}

impl Default for RunEviction {
    fn default() -> Self {
        Self {
            finished: Duration::from_secs(5),
            idle: Duration::from_secs(600),
            max_runs: 1024,
        }
    }
}

type Tx = Transaction<'static, Any>;

/// The earliest monotonic time among a batch's process starts and the records of a run
/// (events, markers, drops, process ends): where a run the batch creates starts.
fn earliest_ts(records: &[Record]) -> Option<u64> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::ProcessStart(p) => Some(p.mono_anchor_ns),
            Record::Events(evs) => evs.iter().map(|e| e.ts_ns).min(),
            Record::Marker(m) => Some(m.ts_ns),
            Record::Dropped(d) => Some(d.ts_ns),
            Record::ProcessEnd(pe) => Some(pe.ts_ns),
            Record::PjrtExecutable(x) => Some(x.ts_ns),
            Record::PjrtMemoryStats(s) => Some(s.ts_ns),
            _ => None,
        })
        .min()
}

/// What a commit applies to run state, in arrival order.
#[derive(Clone, Copy)]
enum Work<'a> {
    /// Events of a run.
    Events(i64, &'a [Event]),
    /// A `process_start` of `pid` at `ts` (an exec when the pid had started before).
    Start { run: i64, pid: u32, ts: u64 },
}

/// A stored run, as ingest finds it again.
#[derive(sqlx::FromRow)]
struct StoredRun {
    id: i64,
    t0_mono_ns: i64,
}

impl Ingestor {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            nodes: HashMap::new(),
            streams: HashMap::new(),
            run_ids: HashMap::new(),
            device_rows: devices::RowCache::default(),
            runs: HashMap::new(),
            failed: FailedStreams::default(),
            busy_retry: DEFAULT_BUSY_RETRY,
            eviction: RunEviction::default(),
            last_eviction: Instant::now(),
        }
    }

    /// When runs leave memory ([`RunEviction::default`]).
    pub fn with_eviction(mut self, e: RunEviction) -> Self {
        self.eviction = e;
        self
    }

    /// Runs whose state is held in memory.
    pub fn runs_in_memory(&self) -> usize {
        self.runs.len()
    }

    /// Gives back the memory of finished and idle runs (see [`RunEviction`]); looks at
    /// most once a second. Call between commits.
    pub fn evict_idle_runs(&mut self) {
        let e = self.eviction;
        let before = self.runs.len();
        if before > e.max_runs {
            // The quietest first, down to three quarters of the cap.
            let keep = e.max_runs - e.max_runs / 4;
            let mut by_touch: Vec<(Instant, i64)> = self
                .runs
                .values()
                .map(|st| (st.touched, st.run_id))
                .collect();
            by_touch.sort_unstable();
            for (_, id) in &by_touch[..before - keep] {
                self.runs.remove(id);
            }
        } else if self.last_eviction.elapsed() < Duration::from_secs(1).min(self.eviction.finished)
        {
            return;
        }
        self.last_eviction = Instant::now();
        self.runs.retain(|_, st| {
            let quiet = st.touched.elapsed();
            !(quiet >= e.idle || (st.running.is_empty() && quiet >= e.finished))
        });
        if self.runs.len() == before {
            return;
        }
        let runs = &self.runs;
        self.run_ids.retain(|_, id| runs.contains_key(id));
        tracing::debug!("{} runs left memory", before - self.runs.len());
        // Freed blocks stay in the process up to glibc's trim threshold otherwise.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free heap memory to the kernel.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// How long a commit refused by a busy database is retried before it fails
    /// ([`DEFAULT_BUSY_RETRY`]; zero: one try).
    pub fn with_busy_retry(mut self, d: Duration) -> Self {
        self.busy_retry = d;
        self
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
        self.device_rows.clear();
    }

    /// The stored run `key` of node `node`, without making one.
    async fn stored_run(
        &mut self,
        tx: &mut Tx,
        node: i64,
        key: &str,
    ) -> Result<Option<i64>, StoreError> {
        if let Some(id) = self.run_ids.get(&(node, key.to_string())) {
            return Ok(Some(*id));
        }
        Ok(
            sqlx::query_scalar("SELECT id FROM runs WHERE node_id = $1 AND run_key = $2")
                .bind(node)
                .bind(key.to_string())
                .fetch_optional(&mut **tx)
                .await?,
        )
    }

    /// Stores `batches` in one transaction; outcomes in the same order. Acknowledge a
    /// batch only after this returned `Ok`, and only when its outcome is not `refused`.
    /// Numbered batches follow [`Sequencing::Increasing`] (`memwatch import`).
    pub async fn commit(&mut self, batches: Vec<Batch>) -> Result<Vec<BatchOutcome>, StoreError> {
        let batches: Vec<(Batch, Sequencing)> = batches
            .into_iter()
            .map(|b| (b, Sequencing::Increasing))
            .collect();
        self.commit_checked(&batches).await
    }

    /// [`Ingestor::commit`] with each batch's numbering rule. A database busy with
    /// another writer is retried with growing pauses for the busy-retry time; a commit
    /// that fails in the end fails every later batch of its streams until the first
    /// failed one is stored.
    pub async fn commit_checked(
        &mut self,
        batches: &[(Batch, Sequencing)],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        let deadline = Instant::now() + self.busy_retry;
        let mut pause = Duration::from_millis(20);
        let mut tries = 1u32;
        loop {
            match self.try_commit(batches).await {
                Ok(outcomes) => {
                    for (b, _) in batches.iter().filter(|(b, _)| b.seq != 0) {
                        if let Some(Some(last)) = self
                            .nodes
                            .get(&b.node)
                            .and_then(|n| self.streams.get(&(*n, b.stream)))
                        {
                            self.failed.stored_through(&b.node, b.stream, *last);
                        }
                    }
                    if tries > 1 {
                        tracing::info!("commit stored after {tries} tries (the database was busy)");
                    }
                    return Ok(outcomes);
                }
                Err(e) if e.is_busy() && Instant::now() + pause < deadline => {
                    tracing::warn!("commit try {tries}: {e}; trying again in {pause:?}");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    tries += 1;
                }
                Err(e) => {
                    for (b, _) in batches.iter().filter(|(b, _)| b.seq != 0) {
                        self.failed.failed(&b.node, b.stream, b.seq);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// One transaction. SQLite takes the write lock up front (`BEGIN IMMEDIATE`): a
    /// transaction that read first and wrote later could not wait for a lock held by
    /// another process (`SQLITE_BUSY_SNAPSHOT` at once).
    async fn try_commit(
        &mut self,
        batches: &[(Batch, Sequencing)],
    ) -> Result<Vec<BatchOutcome>, StoreError> {
        let mut tx = match self.store.backend {
            crate::db::Backend::Sqlite => self.store.pool.begin_with("BEGIN IMMEDIATE").await?,
            crate::db::Backend::Postgres => self.store.pool.begin().await?,
        };
        match self.commit_in(&mut tx, batches).await {
            Ok((outcomes, streams)) => match tx.commit().await {
                Ok(()) => {
                    self.streams
                        .extend(streams.into_iter().map(|(k, v)| (k, Some(v))));
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

    async fn commit_in<'b>(
        &mut self,
        tx: &mut Tx,
        batches: &'b [(Batch, Sequencing)],
    ) -> Result<(Vec<BatchOutcome>, HashMap<(i64, u64), u64>), StoreError> {
        let now = now_unix_ns();
        let mut pending: HashMap<(i64, u64), u64> = HashMap::new();
        let mut outcomes = Vec::with_capacity(batches.len());
        let mut touched: HashSet<i64> = HashSet::new();
        // Events to apply, in arrival order; applied after the other records (whose rows
        // do not depend on them) so that applying overlaps writing (`apply_and_write`).
        let mut work: Vec<Work<'b>> = Vec::new();
        let mut pjrt_rows = pjrt::Pending::new(self.store.backend);
        for (b, rule) in batches {
            let node_id = self.node_id(tx, &b.node, now).await?;
            if b.seq != 0 {
                let last = match pending.get(&(node_id, b.stream)) {
                    Some(s) => Some(*s),
                    None => self.stream_last(tx, node_id, b.stream).await?,
                };
                // Stored since it failed (earlier in this group): no longer a gap.
                let failed = self
                    .failed
                    .get(&b.node, b.stream)
                    .filter(|f| last.is_none_or(|l| l < *f));
                match verdict(b.stream, b.seq, *rule, last, failed) {
                    Verdict::Store => {}
                    Verdict::Duplicate => {
                        outcomes.push(BatchOutcome::skipped(b, None));
                        continue;
                    }
                    Verdict::Refuse(why) => {
                        outcomes.push(BatchOutcome::skipped(b, Some(why)));
                        continue;
                    }
                }
            }
            let key = if b.run_key.is_empty() {
                DEFAULT_RUN_KEY
            } else {
                &b.run_key
            };
            let mut events = 0u64;
            let mut run_id = None;
            // A run this batch creates starts at its earliest record, so that events
            // stamped before their process's start stamp are inside the run.
            let earliest = earliest_ts(&b.records);
            for rec in &b.records {
                match rec {
                    Record::ProcessStart(p) => {
                        let t0 = earliest.unwrap_or(p.mono_anchor_ns).min(p.mono_anchor_ns);
                        // The wall clock at t0, from the stamp's pair of clocks.
                        let wall = p.wall_anchor_unix_ns.saturating_sub(p.mono_anchor_ns - t0);
                        let r = self.run_for(tx, node_id, key, t0, wall, now).await?;
                        run_id = Some(r);
                        if let Some(st) = self.runs.get_mut(&r) {
                            st.running.insert(p.pid);
                        }
                        records::process_start(tx, r, p).await?;
                        // In arrival order with the events: a pid's next start is an
                        // exec, which releases the image before it.
                        touched.insert(r);
                        work.push(Work::Start {
                            run: r,
                            pid: p.pid,
                            ts: p.mono_anchor_ns,
                        });
                    }
                    Record::Events(evs) => {
                        let Some(first) = evs.first() else { continue };
                        let t0 = earliest.unwrap_or(first.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        touched.insert(r);
                        work.push(Work::Events(r, evs.as_slice()));
                        events += evs.len() as u64;
                        let st = self.state(r)?;
                        pjrt_rows
                            .events(tx, r, evs, &mut st.outputs, &st.pool)
                            .await?;
                    }
                    Record::DeviceInfo(d) => {
                        self.device_rows.info(tx, node_id, d).await?;
                        // A process's own view, in its run (one the batch named or made).
                        if d.pid != 0 {
                            let r = match run_id {
                                Some(r) => Some(r),
                                None => self.stored_run(tx, node_id, key).await?,
                            };
                            if let Some(r) = r {
                                devices::process_device(tx, r, d).await?;
                            }
                        }
                    }
                    Record::Marker(m) => {
                        let t0 = earliest.unwrap_or(m.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        records::marker(tx, r, m).await?;
                    }
                    Record::Dropped(d) => {
                        let t0 = earliest.unwrap_or(d.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        touched.insert(r);
                        if let Some(st) = self.runs.get_mut(&r) {
                            st.dropped.insert(d.pid, d.dropped_total);
                            st.dirty = true;
                        }
                        records::dropped(tx, r, d).await?;
                    }
                    Record::ProcessEnd(pe) => {
                        let t0 = earliest.unwrap_or(pe.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        if let Some(st) = self.runs.get_mut(&r) {
                            st.running.remove(&pe.pid);
                        }
                        records::process_end(tx, r, pe).await?;
                    }
                    Record::DeviceSample(s) => {
                        let row = self.device_rows.sample(tx, node_id, s.device).await?;
                        records::device_sample(tx, node_id, s, row, now).await?;
                    }
                    // memwatch's own device readings: the device-wide figure is a device
                    // sample of the node (VRAM); the per-process figures stay in the
                    // capture file (`memwatch report` / `diagnose` read them there).
                    Record::DeviceReading(d) => {
                        // Which device the index is, once per identity and size seen.
                        let row = self.device_rows.reading(tx, node_id, d).await?;
                        let s = memwatch_wire::DeviceSample {
                            ts_ns: d.ts_ns,
                            device: d.device,
                            memory: 0,
                            used_bytes: d.used_bytes,
                            total_bytes: d.total_bytes,
                            source: d.source.clone(),
                        };
                        records::device_sample(tx, node_id, &s, Some(row), now).await?;
                    }
                    // PJRT executable / allocator-statistics frames: `pjrt`.
                    Record::PjrtExecutable(x) => {
                        let t0 = earliest.unwrap_or(x.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        pjrt::store_executable(tx, r, x).await?;
                    }
                    Record::PjrtMemoryStats(s) => {
                        let t0 = earliest.unwrap_or(s.ts_ns);
                        let r = self.run_for(tx, node_id, key, t0, 0, now).await?;
                        run_id = Some(r);
                        let st = self.state(r)?;
                        pjrt_rows.memory_stats(tx, r, s, &mut st.pool).await?;
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
                refused: None,
            });
        }
        pjrt_rows.write(tx).await?;
        let execs = self.apply_and_write(tx, &work, now).await?;
        for x in &execs {
            records::process_image(tx, x).await?;
        }
        for r in touched {
            self.flush_run(tx, r, now).await?;
        }
        Ok((outcomes, pending))
    }

    /// The in-memory state of run `r` ([`Ingestor::run_for`] made or loaded it).
    fn state(&mut self, r: i64) -> Result<&mut RunState, StoreError> {
        self.runs
            .get_mut(&r)
            .ok_or_else(|| StoreError::Corrupt(format!("run {r} vanished from memory")))
    }

    async fn node_id(&mut self, tx: &mut Tx, name: &str, now: i64) -> Result<i64, StoreError> {
        if let Some(id) = self.nodes.get(name) {
            return Ok(*id);
        }
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO nodes (name, first_seen_unix_ns, last_seen_unix_ns) VALUES ($1, $2, $2) \
             ON CONFLICT (name) DO UPDATE SET last_seen_unix_ns = excluded.last_seen_unix_ns \
             RETURNING id",
        )
        .bind(name.to_string())
        .bind(now)
        .fetch_one(&mut **tx)
        .await?;
        self.nodes.insert(name.to_string(), id);
        Ok(id)
    }

    async fn stream_last(
        &mut self,
        tx: &mut Tx,
        node: i64,
        stream: u64,
    ) -> Result<Option<u64>, StoreError> {
        if let Some(s) = self.streams.get(&(node, stream)) {
            return Ok(*s);
        }
        let last: Option<i64> = sqlx::query_scalar(
            "SELECT last_seq FROM streams WHERE node_id = $1 AND stream_id = $2",
        )
        .bind(node)
        .bind(stream as i64)
        .fetch_optional(&mut **tx)
        .await?;
        let last = last.map(|l| l as u64);
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
            if let Some(st) = self.runs.get_mut(id) {
                st.touched = Instant::now();
                return Ok(*id);
            }
        }
        let row: Option<StoredRun> =
            sqlx::query_as("SELECT id, t0_mono_ns FROM runs WHERE node_id = $1 AND run_key = $2")
                .bind(node)
                .bind(key.to_string())
                .fetch_optional(&mut **tx)
                .await?;
        let id = match row {
            Some(StoredRun { id, t0_mono_ns }) => {
                let st = rebuild::rebuild(tx, id, t0_mono_ns as u64).await?;
                self.runs.insert(id, st);
                id
            }
            None => {
                let id: i64 = sqlx::query_scalar(
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
                self.runs.insert(id, RunState::new(id, t0));
                id
            }
        };
        self.run_ids.insert((node, key.to_string()), id);
        Ok(id)
    }

    /// Applies `work` in slices; while one slice is applied (CPU, this task), the chunks
    /// and rollups finished by the previous slice are written (the database works on its
    /// own thread or process), so the two overlap. Same rows, same order per device as
    /// writing everything at the end; all in the caller's transaction.
    async fn apply_and_write(
        &mut self,
        tx: &mut Tx,
        work: &[Work<'_>],
        now: i64,
    ) -> Result<Vec<records::ImageStart>, StoreError> {
        let backend = self.store.backend;
        let (mut wi, mut ei) = (0usize, 0usize);
        let mut ready: Ready = (Vec::new(), Vec::new());
        let mut execs = Vec::new();
        loop {
            let runs = &mut self.runs;
            let found = &mut execs;
            let write = write_ready(tx, backend, std::mem::take(&mut ready), now);
            let apply = async {
                let mut n = 0usize;
                let mut seen: HashSet<i64> = HashSet::new();
                while wi < work.len() && n < APPLY_SLICE {
                    let (r, evs) = match work[wi] {
                        Work::Events(r, evs) => (r, evs),
                        Work::Start { run, pid, ts } => {
                            let st = runs.get_mut(&run).ok_or_else(|| {
                                StoreError::Corrupt(format!("run {run} vanished from memory"))
                            })?;
                            seen.insert(run);
                            if let Some(image) = st.process_start(pid, ts, true) {
                                found.push(records::ImageStart {
                                    run,
                                    pid,
                                    image,
                                    ts,
                                });
                            }
                            wi += 1;
                            continue;
                        }
                    };
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
                return Ok(execs);
            }
        }
    }

    async fn flush_run(&mut self, tx: &mut Tx, run: i64, now: i64) -> Result<(), StoreError> {
        let backend = self.store.backend;
        match self.runs.get_mut(&run) {
            Some(st) => flush_run(tx, backend, st, now).await,
            None => Ok(()),
        }
    }
}
