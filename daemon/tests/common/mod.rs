//! Test helpers: fresh databases for every backend under test, synthetic events.
#![allow(dead_code)]

pub mod child;
pub mod client;
pub mod corpus;
pub mod http;

use std::sync::Arc;

use memwatch_daemon::spawn_writer;
use memwatch_daemon::Metrics;
use memwatch_daemon::{router, AppState};
use memwatch_daemon::{Ingestor, Store};
use memwatch_wire::{Event, EventKind, MemKind, ProcessStart, Record};

/// A fresh database per backend: always SQLite (temp file); PostgreSQL when
/// MEMWATCH_TEST_POSTGRES_URL is set (a new database is created on that server).
pub struct Dbs {
    pub urls: Vec<String>,
    _dir: tempfile::TempDir,
}

pub async fn dbs(name: &str) -> Dbs {
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![dir.path().join("t.db").display().to_string()];
    match std::env::var("MEMWATCH_TEST_POSTGRES_URL") {
        Ok(admin) if !admin.is_empty() => {
            sqlx::any::install_default_drivers();
            let pool = sqlx::AnyPool::connect(&admin).await.unwrap_or_else(|e| {
                panic!("connecting to MEMWATCH_TEST_POSTGRES_URL [{admin}]: {e}")
            });
            let db = format!(
                "mwtest_{}_{}_{}",
                name,
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
            );
            sqlx::query(&format!("CREATE DATABASE {db}"))
                .execute(&pool)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').unwrap().0;
            urls.push(format!("{base}/{db}"));
        }
        _ => eprintln!(
            "NOTICE: MEMWATCH_TEST_POSTGRES_URL is not set: PostgreSQL variant of `{name}` skipped"
        ),
    }
    Dbs { urls, _dir: dir }
}

/// The daemon's router over a store at `url` with its writer task, as `memwatch serve`
/// builds it; `token` is the bearer token it requires, `max_body` its request size limit.
pub async fn test_app(url: &str, token: Option<&str>, max_body: usize) -> (axum::Router, Store) {
    let store = Store::open(url).await.unwrap();
    let metrics = Arc::new(Metrics::default());
    let (writer, _) = spawn_writer(
        Ingestor::new(store.clone()),
        metrics.clone(),
        memwatch_daemon::IngestLimits::default(),
    );
    let state = AppState {
        store: store.clone(),
        writer,
        metrics,
        token: token.map(str::to_string),
    };
    (router(state, max_body), store)
}

pub fn ev(ts: u64, kind: EventKind, ptr: u64, size: u64, device: i32) -> Event {
    Event {
        ts_ns: ts,
        ptr,
        size,
        pid: 42,
        tid: 7,
        device,
        kind: kind as u8,
        mem_kind: if matches!(
            kind,
            EventKind::Alloc | EventKind::Free | EventKind::AllocFailed
        ) {
            MemKind::Device as u8
        } else {
            0
        },
        api: 1,
        ..Event::default()
    }
}

pub fn start(pid: u32, t0: u64) -> Record {
    Record::ProcessStart(ProcessStart {
        pid,
        ppid: 1,
        mono_anchor_ns: t0,
        wall_anchor_unix_ns: 1_700_000_000_000_000_000,
        shim_version: "test".into(),
        hostname: "testhost".into(),
        argv: vec!["python".into(), "train.py".into()],
        pid_ns: None,
    })
}

/// A deterministic pseudo-random workload: allocs and frees on `devices` devices with a
/// known exact live-bytes curve. Returns the events.
pub fn workload(n: usize, t0: u64, devices: i32, seed: u64) -> Vec<Event> {
    let mut x = seed | 1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut live: Vec<(u64, i32)> = Vec::new();
    let mut out = Vec::with_capacity(n);
    let mut ts = t0 + 1000;
    let mut next_ptr = 0x1000u64;
    for _ in 0..n {
        ts += 1 + rnd() % 20_000;
        let r = rnd();
        if live.is_empty() || r % 100 < 55 {
            let dev = (rnd() % devices as u64) as i32;
            let size = 256 << (rnd() % 16);
            next_ptr += 0x1_0000;
            live.push((next_ptr, dev));
            out.push(ev(ts, EventKind::Alloc, next_ptr, size, dev));
        } else {
            let i = (rnd() as usize) % live.len();
            let (p, dev) = live.swap_remove(i);
            out.push(ev(ts, EventKind::Free, p, 0, dev));
        }
    }
    out
}

/// Exact live bytes after each event of `device` (ts, live).
pub fn exact_curve(events: &[Event], device: i32) -> Vec<(u64, i64)> {
    let mut sizes = std::collections::HashMap::new();
    let mut live = 0i64;
    let mut out = Vec::new();
    for e in events {
        match EventKind::from_u8(e.kind) {
            Some(EventKind::Alloc) => {
                sizes.insert(e.ptr, (e.size, e.device));
                if e.device == device {
                    live += e.size as i64;
                    out.push((e.ts_ns, live));
                }
            }
            Some(EventKind::Free) => {
                if let Some((s, d)) = sizes.remove(&e.ptr) {
                    if d == device {
                        live -= s as i64;
                        out.push((e.ts_ns, live));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Every stored event of `device` in run `run`, in commit order, as (ts, ptr, size, pid):
/// what the events endpoint pages through.
pub async fn stored_events(store: &Store, run: i64, device: i64) -> Vec<(u64, u64, u64, u32)> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .events(run, device, None, None, cursor, 100_000)
            .await
            .unwrap()
            .expect("the run exists");
        out.extend(page.events.iter().map(|e| (e.ts_ns, e.ptr, e.size, e.pid)));
        match page.next_cursor {
            Some(c) => {
                let (a, b) = c.split_once(':').unwrap();
                cursor = Some((a.parse().unwrap(), b.parse().unwrap()));
            }
            None => return out,
        }
    }
}

/// The same key for events made in a test.
pub fn event_keys(events: &[Event], device: i32) -> Vec<(u64, u64, u64, u32)> {
    events
        .iter()
        .filter(|e| e.device == device)
        .map(|e| (e.ts_ns, e.ptr, e.size, e.pid))
        .collect()
}
