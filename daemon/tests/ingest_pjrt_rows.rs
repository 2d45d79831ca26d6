//! The PJRT rows of a long JAX loop (executions, output buffers, allocator samples,
//! failed executes) are stored the same however the records are cut into batches and
//! commits: one record per commit (what storing each row at its record gives), every
//! record in one commit, and random batches grouped into commits; each failed execute's
//! live bytes are the allocator's last sample at or before its end among the records
//! before it. And a commit's PJRT rows take a few multi-row statements, not one
//! statement per event (sqlx's statement log, counted). Generated loops of several
//! shapes (completions flushed before or after their executes, samples late, frees in
//! the loop and at exit, killed runs, two processes); SQLite, and PostgreSQL when
//! MEMWATCH_TEST_POSTGRES_URL is set.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::dbs;
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{
    Api, CompiledMemoryStats, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats,
    ProcessEnd, ProcessStart, Record,
};
use sqlx::Row;

/// sqlx's statement log (target `sqlx::query`, one event per statement run), counted.
static STATEMENTS: AtomicU64 = AtomicU64::new(0);

struct CountStatements;

impl tracing::Subscriber for CountStatements {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "sqlx::query"
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if e.metadata().target() == "sqlx::query" {
            STATEMENTS.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

const HANDLE: u64 = 0x5555_0000_1000;
const RESOURCE_EXHAUSTED: i32 = 8;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn ev(pid: u32, tid: u32, device: i32, kind: EventKind, mem: MemKind, api: Api, ts: u64) -> Event {
    Event {
        ts_ns: ts,
        pid,
        tid,
        device,
        ..Event::new(kind, mem, api)
    }
}

/// A JAX loop that keeps outputs (some freed in the loop), the pool filling until
/// executions fail (through their completion, or at once), as the shim records it: each
/// thread's events flushed as a record every few steps, the callback thread's first at
/// some flushes, an allocator sample at each flush (some late). `pids` processes, each
/// on its own device.
fn jax_loop(seed: u64, steps: u64, pids: u32, killed: bool) -> Vec<Record> {
    let mut r = Rng(seed | 1);
    let t_start = 5_000_000_000u64;
    let mut recs = Vec::new();
    let out_bytes = 16u64 << 20;
    let pool = out_bytes * (steps / 3 + r.below(steps / 3));
    for p in 0..pids {
        let pid = 4000 + p;
        recs.push(Record::ProcessStart(ProcessStart {
            pid,
            ppid: 1,
            mono_anchor_ns: t_start,
            wall_anchor_unix_ns: 1_795_000_000_000_000_000,
            shim_version: "test".into(),
            hostname: "h".into(),
            argv: vec!["python3".into()],
            pid_ns: None,
        }));
        recs.push(Record::PjrtExecutable(PjrtExecutable {
            pid,
            ts_ns: t_start + 1000,
            handle: HANDLE,
            flags: PjrtExecutable::FLAG_STATS,
            stats: CompiledMemoryStats {
                output: out_bytes as i64,
                temp: 2 * out_bytes as i64,
                ..CompiledMemoryStats::default()
            },
            devices: vec![p as i32],
            name: "jit_refine".into(),
            fingerprint: "fp".into(),
        }));
    }
    for p in 0..pids {
        let (pid, dev) = (4000 + p, p as i32);
        let (mut main, mut callback) = (Vec::new(), Vec::new());
        let mut in_use = 0u64;
        let mut live: Vec<u64> = Vec::new();
        let mut free_ptrs: Vec<u64> = Vec::new();
        let mut next_ptr = 0x5600_0000_0000u64 + (p as u64) * 0x1_0000_0000;
        let mut flush_in = 1 + r.below(40);
        let mut last_sample = 0u64;
        let mut t = t_start + 1_000_000;
        for step in 0..steps {
            t += 50_000 + r.below(100_000);
            let dur = 20_000 + r.below(30_000);
            let fits = in_use + 3 * out_bytes <= pool;
            let sync_fail = !fits && r.below(5) == 0;
            main.push(Event {
                ptr: HANDLE,
                duration_ns: dur,
                result: if sync_fail { RESOURCE_EXHAUSTED } else { 0 },
                ..ev(
                    pid,
                    pid,
                    dev,
                    EventKind::ApiSpan,
                    MemKind::None,
                    Api::PjrtExecute,
                    t,
                )
            });
            if !sync_fail {
                // Addresses are reused after their buffer was freed.
                let ptr = if !free_ptrs.is_empty() && r.below(2) == 0 {
                    free_ptrs.swap_remove(r.below(free_ptrs.len() as u64) as usize)
                } else {
                    next_ptr += 0x40;
                    next_ptr
                };
                let mut out = Event {
                    ptr,
                    size: out_bytes,
                    aux: HANDLE,
                    duration_ns: dur,
                    ..ev(
                        pid,
                        pid,
                        dev,
                        EventKind::Alloc,
                        MemKind::PjrtBuffer,
                        Api::PjrtExecuteOutput,
                        t,
                    )
                };
                out.set_pjrt_output_index(0);
                main.push(out);
                live.push(ptr);
                callback.push(Event {
                    ptr: HANDLE,
                    duration_ns: dur + r.below(200_000),
                    result: if fits { 0 } else { RESOURCE_EXHAUSTED },
                    size: if fits { 0 } else { 2 * out_bytes },
                    ..ev(
                        pid,
                        pid + 50,
                        dev,
                        EventKind::ApiSpan,
                        MemKind::None,
                        Api::PjrtExecuteComplete,
                        t,
                    )
                });
                if fits {
                    in_use += out_bytes;
                }
            }
            // Some outputs are dropped in the loop.
            if live.len() > 2 && r.below(4) == 0 {
                let ptr = live.swap_remove(r.below(live.len() as u64 - 1) as usize);
                main.push(Event {
                    ptr,
                    duration_ns: 2_000,
                    ..ev(
                        pid,
                        pid,
                        -1,
                        EventKind::Free,
                        MemKind::PjrtBuffer,
                        Api::PjrtBufferDestroy,
                        t + dur,
                    )
                });
                free_ptrs.push(ptr);
                in_use = in_use.saturating_sub(out_bytes);
            }
            flush_in -= 1;
            if flush_in == 0 || step + 1 == steps {
                flush_in = 1 + r.below(40);
                // A late sample now and then: stamped before the one written last.
                let ts = if last_sample > 0 && r.below(6) == 0 {
                    last_sample - r.below(300_000).min(last_sample - t_start)
                } else {
                    t + dur
                };
                last_sample = last_sample.max(ts);
                recs.push(Record::PjrtMemoryStats(PjrtMemoryStats {
                    pid,
                    ts_ns: ts,
                    device: dev,
                    flags: PjrtMemoryStats::BYTES_IN_USE | PjrtMemoryStats::POOL_BYTES,
                    bytes_in_use: in_use as i64 + r.below(1000) as i64,
                    pool_bytes: pool as i64,
                    ..PjrtMemoryStats::default()
                }));
                let (a, b) = (std::mem::take(&mut main), std::mem::take(&mut callback));
                let (first, second) = if r.below(2) == 0 { (a, b) } else { (b, a) };
                for lane in [first, second] {
                    if !lane.is_empty() {
                        recs.push(Record::Events(lane));
                    }
                }
            }
        }
        if !killed {
            let frees: Vec<Event> = live
                .iter()
                .enumerate()
                .map(|(k, ptr)| Event {
                    ptr: *ptr,
                    duration_ns: 2_000,
                    ..ev(
                        pid,
                        pid,
                        -1,
                        EventKind::Free,
                        MemKind::PjrtBuffer,
                        Api::PjrtBufferDestroy,
                        t + 1_000_000 + k as u64 * 3_000,
                    )
                })
                .collect();
            recs.push(Record::Events(frees));
            recs.push(Record::ProcessEnd(ProcessEnd {
                pid,
                ts_ns: t + 100_000_000,
                exit_code: 0,
            }));
        }
    }
    recs
}

/// The live bytes each failed execute's incident must carry, in record order: the
/// allocator's bytes in use of the newest sample of its pid and device stamped at or
/// before the execution's end, among the records before it (0 when none).
fn expected_incident_live(recs: &[Record]) -> Vec<i64> {
    let mut samples: Vec<(u32, i32, u64, i64)> = Vec::new();
    let mut want = Vec::new();
    for rec in recs {
        match rec {
            Record::PjrtMemoryStats(s) => samples.push((s.pid, s.device, s.ts_ns, s.bytes_in_use)),
            Record::Events(evs) => {
                for e in evs.iter().filter(|e| {
                    e.result != 0
                        && (e.is_api(Api::PjrtExecute) || e.is_api(Api::PjrtExecuteComplete))
                }) {
                    let end = e.ts_ns + e.duration_ns;
                    let mut best: Option<(u64, i64)> = None;
                    for &(pid, dev, ts, b) in &samples {
                        if pid == e.pid
                            && dev == e.device
                            && ts <= end
                            && best.is_none_or(|x| ts >= x.0)
                        {
                            best = Some((ts, b));
                        }
                    }
                    want.push(best.map_or(0, |x| x.1));
                }
            }
            _ => {}
        }
    }
    want
}

/// Every PJRT row and incident of run `run`, in id order (or by value without ids), without ids, run and
/// wall-clock columns.
async fn rows(store: &Store, run: i64) -> Vec<(String, Vec<Option<i64>>)> {
    let tables = [
        ("pjrt_executions", "pid, device, handle, start_ns, call_ns, result, requested_bytes, complete_ns, complete_result, complete_requested_bytes"),
        ("pjrt_buffers", "pid, device, ptr, size, api, producer, ts_ns, freed_ts_ns, output_index"),
        ("pjrt_memory_stats", "pid, device, ts_ns, flags, bytes_in_use, pool_bytes"),
        ("pjrt_compiles", "pid, api, handle, ts_ns, duration_ns, result"),
        ("incidents", "pid, tid, device, ts_ns, size, result, live_bytes"),
    ];
    let mut out = Vec::new();
    for (table, cols) in tables {
        // The tables without ids in the order of their columns.
        let order = match table {
            "pjrt_memory_stats" | "pjrt_compiles" => cols,
            _ => "id",
        };
        let sql = format!("SELECT {cols} FROM {table} WHERE run_id = $1 ORDER BY {order}");
        for row in sqlx::query(&sql)
            .bind(run)
            .fetch_all(&store.pool)
            .await
            .unwrap()
        {
            let vals = (0..row.len())
                .map(|i| row.try_get::<Option<i64>, _>(i).unwrap())
                .collect();
            out.push((table.to_string(), vals));
        }
    }
    out
}

fn batch(stream: u64, seq: u64, key: &str, records: Vec<Record>) -> Batch {
    Batch {
        node: "n".into(),
        stream,
        seq,
        run_key: key.into(),
        records,
    }
}

async fn run_id(store: &Store, key: &str) -> i64 {
    let runs = store.runs(100).await.unwrap();
    runs.iter().find(|r| r.run_key == key).unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pjrt_rows_do_not_depend_on_batching_and_take_few_statements() {
    tracing::subscriber::set_global_default(CountStatements).unwrap();
    let d = dbs("ingest_pjrt_rows").await;
    for url in &d.urls {
        let store = Store::open(url).await.unwrap();
        let mut ing = Ingestor::new(store.clone());
        for (shape, (seed, steps, pids, killed)) in [
            (11u64, 3000u64, 1u32, true),
            (12, 2500, 2, false),
            (13, 4000, 1, false),
            (14, 1500, 2, true),
        ]
        .into_iter()
        .enumerate()
        {
            let recs = jax_loop(seed, steps, pids, killed);
            let stream = 100 * shape as u64;
            // Every record in one commit, counting its statements.
            let key = |k: &str| format!("{shape}:{k}");
            let before = STATEMENTS.load(Ordering::Relaxed);
            ing.commit(vec![batch(stream + 1, 1, &key("one"), recs.clone())])
                .await
                .unwrap();
            let statements = STATEMENTS.load(Ordering::Relaxed) - before;
            let events: u64 = recs
                .iter()
                .map(|r| match r {
                    Record::Events(e) => e.len() as u64,
                    _ => 0,
                })
                .sum();
            assert!(
                statements > 0,
                "{url}: sqlx's statement log was not counted"
            );
            assert!(
                statements * 100 < events,
                "{url} shape {shape}: {statements} statements for {events} events"
            );
            // One record per commit.
            for (i, rec) in recs.iter().enumerate() {
                ing.commit(vec![batch(
                    stream + 2,
                    i as u64 + 1,
                    &key("each"),
                    vec![rec.clone()],
                )])
                .await
                .unwrap();
            }
            // Random batches, several to a commit.
            let mut r = Rng(seed * 7 + 3);
            let (mut seq, mut rest) = (0u64, recs.as_slice());
            while !rest.is_empty() {
                let mut group = Vec::new();
                for _ in 0..1 + r.below(4) {
                    let n = (1 + r.below(60) as usize).min(rest.len());
                    if n == 0 {
                        break;
                    }
                    seq += n as u64;
                    group.push(batch(stream + 3, seq, &key("mixed"), rest[..n].to_vec()));
                    rest = &rest[n..];
                }
                ing.commit(group).await.unwrap();
            }
            let one = rows(&store, run_id(&store, &key("one")).await).await;
            let each = rows(&store, run_id(&store, &key("each")).await).await;
            let mixed = rows(&store, run_id(&store, &key("mixed")).await).await;
            assert_eq!(one.len(), each.len(), "{url} shape {shape}");
            assert_eq!(
                one, each,
                "{url} shape {shape}: one commit vs one record a commit"
            );
            assert_eq!(
                one, mixed,
                "{url} shape {shape}: one commit vs random batches"
            );
            let live: Vec<i64> = one
                .iter()
                .filter(|(t, _)| t == "incidents")
                .map(|(_, v)| v[6].unwrap())
                .collect();
            let want = expected_incident_live(&recs);
            assert!(
                want.len() > 50,
                "shape {shape}: {} failed executes",
                want.len()
            );
            assert_eq!(live, want, "{url} shape {shape}: incidents' live bytes");
            let freed = one
                .iter()
                .filter(|(t, v)| t == "pjrt_buffers" && v[7].is_some())
                .count();
            assert!(freed > 100, "shape {shape}: {freed} buffers freed");
        }
        store.pool.close().await;
    }
}
