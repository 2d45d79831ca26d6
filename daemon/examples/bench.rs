//! Daemon benchmarks (prints figures):
//!   bench ingest DB N        agent forwarder -> TCP -> daemon -> committed, events/s
//!   bench query DB N         ingest N events into one run, then time timeline and peak
//!   bench spool N_MIB        forwarder with an unreachable daemon: spool N MiB, print RSS
//! DB: a SQLite path or postgres:// URL.
//! `cargo run --release -p memwatch-daemon --example bench -- ingest /tmp/b.db 10000000`

use std::time::{Duration, Instant};

use memwatch_agent::forwarder::{Forwarder, ForwarderConfig};
use memwatch_daemon::{Batch, Ingestor, ServeConfig, Store};
use memwatch_wire::{encode_record, Event, ProcessStart, Record};

/// A steady workload: each thread allocates and frees in a rolling window (live set
/// ~ 2,000 allocations per device), timestamps 1 µs apart.
fn gen(start: u64, n: usize, devices: i32) -> Vec<Event> {
    (0..n as u64)
        .map(|k| {
            let i = start + k;
            let device = (i % devices as u64) as i32;
            let slot = i / devices as u64;
            let (kind, ptr, size) = if slot.is_multiple_of(2) {
                (
                    1u8,
                    ((device as u64) << 40) + 0x1000_0000 + (slot / 2) * 0x1000,
                    4096 + (slot * 7919 % 1_000_000),
                )
            } else {
                // Free the allocation made 2,000 slots earlier (never before it existed).
                let a = (slot / 2).saturating_sub(2000);
                (2u8, ((device as u64) << 40) + 0x1000_0000 + a * 0x1000, 0)
            };
            Event {
                ts_ns: 1_000_000 + i * 1000,
                ptr,
                size,
                pid: 77,
                tid: 1 + device as u32,
                device,
                kind,
                mem_kind: 1,
                api: if kind == 1 { 1 } else { 2 },
                ..Event::default()
            }
        })
        .collect()
}

fn start_rec() -> Record {
    Record::ProcessStart(ProcessStart {
        pid: 77,
        ppid: 1,
        mono_anchor_ns: 1_000_000,
        wall_anchor_unix_ns: 1_795_000_000_000_000_000,
        shim_version: "bench".into(),
        hostname: "bench".into(),
        argv: vec!["bench".into()],
    })
}

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

async fn ingest(db: &str, n: usize) {
    let mut cfg = ServeConfig::new(db);
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.ingest = "127.0.0.1:0".parse().unwrap();
    let running = memwatch_daemon::start(cfg).await.unwrap();
    let spool = tempfile::tempdir().unwrap();
    let mut fc = ForwarderConfig::new(
        running.ingest_addr.to_string(),
        "bench",
        spool.path().into(),
    );
    fc.batch_bytes = 4 << 20;
    fc.run_key = Some("bench".into());
    let t = Instant::now();
    let events_per_frame = 4096;
    let n2 = n;
    let elapsed = tokio::task::spawn_blocking(move || {
        let fwd = Forwarder::start(fc).unwrap();
        let key = fwd.open_stream("bench-ingest");
        let mut buf = Vec::new();
        encode_record(&start_rec(), &mut buf).unwrap();
        fwd.push(key, &buf).unwrap();
        let mut done = 0;
        while done < n2 {
            let k = events_per_frame.min(n2 - done);
            buf.clear();
            encode_record(&Record::Events(gen(done as u64, k, 8)), &mut buf).unwrap();
            fwd.push(key, &buf).unwrap();
            done += k;
        }
        assert!(fwd.shutdown(Duration::from_secs(3600)), "all acknowledged");
        t.elapsed()
    })
    .await
    .unwrap();
    let runs = running.store.runs(5).await.unwrap();
    let stored: i64 = runs.iter().map(|r| r.event_count).sum();
    assert_eq!(stored as usize, n);
    println!(
        "ingest end-to-end (forwarder+spool -> TCP -> daemon -> committed) into {}: {n} events in {:.2} s = {:.0} events/s",
        memwatch_daemon::redact(db),
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
}

/// CPU time of the whole process (all threads), ms.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// Times one timeline query; returns (ms, source, level).
async fn time_timeline(
    store: &Store,
    run: i64,
    from: u64,
    to: u64,
) -> (f64, &'static str, Option<usize>) {
    let t = Instant::now();
    let tl = store
        .timeline(run, 3, Some(from), Some(to), 2000)
        .await
        .unwrap()
        .unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    assert_eq!(tl.points.len(), 2000.min(((to - from) as usize).max(1)));
    (ms, tl.source, tl.level)
}

/// With MEMWATCH_BENCH_EVICT=1, drops the SQLite file's pages from the OS page cache
/// (posix_fadvise DONTNEED), so the next query reads from disk: colder than a daemon
/// restart, which keeps the OS cache.
fn evict(db: &str) -> bool {
    use std::os::fd::AsRawFd;
    if std::env::var("MEMWATCH_BENCH_EVICT").as_deref() != Ok("1") || db.contains("://") {
        return false;
    }
    for path in [db.to_string(), format!("{db}-wal")] {
        if let Ok(f) = std::fs::File::open(&path) {
            let _ = f.sync_all();
            // SAFETY: a valid open descriptor; advice only, no memory is touched.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
    true
}

async fn query(db: &str, n: usize) {
    let store = Store::open(db).await.unwrap();
    let have = store
        .runs(100)
        .await
        .unwrap()
        .iter()
        .find(|r| r.run_key == "bench-query")
        .map_or(0, |r| r.event_count as usize);
    if have == n {
        println!("reusing the stored run of {n} events (delete {db} to regenerate)");
    } else {
        assert_eq!(have, 0, "{db} holds a bench-query run of another size");
        let mut ing = Ingestor::new(store.clone());
        let t = Instant::now();
        let per = 1 << 20;
        let mut done = 0usize;
        let mut seq = 1;
        while done < n {
            let k = per.min(n - done);
            let mut recs = Vec::new();
            if done == 0 {
                recs.push(start_rec());
            }
            for c in gen(done as u64, k, 8).chunks(8192) {
                recs.push(Record::Events(c.to_vec()));
            }
            ing.commit(vec![Batch {
                node: "bench".into(),
                stream: 1,
                seq,
                run_key: "bench-query".into(),
                records: recs,
            }])
            .await
            .unwrap();
            seq += 1;
            done += k;
            if done % (10 << 20) < per {
                eprintln!(
                    "  generated {done} events ({:.0} events/s)",
                    done as f64 / t.elapsed().as_secs_f64()
                );
            }
        }
        println!(
            "direct ingest (no network) of {n} events: {:.1} s = {:.0} events/s",
            t.elapsed().as_secs_f64(),
            n as f64 / t.elapsed().as_secs_f64()
        );
    }
    let runs = store.runs(10).await.unwrap();
    let run = runs.iter().find(|r| r.run_key == "bench-query").unwrap();
    let (run_id, span) = (run.id, run.duration_ns as u64);
    println!(
        "run {}: {} events, {:.3} s of trace time, 8 devices",
        run_id,
        run.event_count,
        span as f64 / 1e9
    );
    store.pool.close().await;
    drop(store);
    // Worst zooms for the rollups: a bucket just under a level's width reads ~4x as
    // many rows as points; the finest rollup-less zoom reads raw events.
    let w = |l: u32| 1u64 << (18 + 2 * l);
    let mut zooms: Vec<(String, u64, u64)> = vec![
        ("whole run".into(), 0, span),
        ("1/10 of the run".into(), span / 3, span / 3 + span / 10),
        ("1/1000 of the run".into(), span / 2, span / 2 + span / 1000),
        (
            "1/100000 of the run".into(),
            span / 2,
            span / 2 + span / 100_000,
        ),
    ];
    for l in 0..4u32 {
        let len = 2000 * (w(l + 1) - 1);
        if len <= span {
            zooms.push((
                format!(
                    "{:.3} s (buckets just under level {})",
                    len as f64 / 1e9,
                    l + 1
                ),
                span / 4,
                span / 4 + len,
            ));
        }
    }
    let len = 2000 * (w(0) - 1);
    if len <= span {
        zooms.push((
            format!(
                "{:.3} s (buckets just under level 0: raw, most events)",
                len as f64 / 1e9
            ),
            span / 4,
            span / 4 + len,
        ));
    }
    let mut worst_cold = 0f64;
    let mut worst_warm = 0f64;
    let mut worst_median = 0f64;
    for (name, from, to) in &zooms {
        // Cold: a fresh store (new connections, empty SQLite page cache), as after a
        // daemon start; its first query is timed.
        let evicted = evict(db);
        let store = Store::open(db).await.unwrap();
        let c0 = cpu_ms();
        let (cold, src, level) = time_timeline(&store, run_id, *from, *to).await;
        let cold_cpu = cpu_ms() - c0;
        // Warm: 20 more; the median, and the worst (on a shared machine the worst can
        // include time slices given to other processes).
        let mut ts = Vec::new();
        for _ in 0..20 {
            let c = cpu_ms();
            let wall = time_timeline(&store, run_id, *from, *to).await.0;
            ts.push((wall, cpu_ms() - c));
        }
        ts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (median, (warm, warm_cpu)) = (ts[ts.len() / 2].0, ts[ts.len() - 1]);
        worst_median = worst_median.max(median);
        worst_cold = worst_cold.max(cold);
        worst_warm = worst_warm.max(warm);
        let src = match level {
            Some(l) => format!("{src} level {l}"),
            None => src.to_string(),
        };
        println!(
            "timeline 2000 points, {name}: cold {cold:.2} ms (CPU {cold_cpu:.1} ms){}, warm median {median:.2} ms, worst of 20 {warm:.2} ms (CPU {warm_cpu:.1} ms) ({src})",
            if evicted { " (file evicted from the OS cache)" } else { "" }
        );
        store.pool.close().await;
    }
    println!(
        "timeline worst over all zooms: cold {worst_cold:.2} ms, warm median {worst_median:.2} ms, warm worst {worst_warm:.2} ms"
    );
    evict(db);
    let store = Store::open(db).await.unwrap();
    let mut worst = Duration::ZERO;
    let mut cold = Duration::ZERO;
    for i in 0..6 {
        let t = Instant::now();
        let p = store.peak(run_id, 3, 20).await.unwrap().unwrap();
        if i == 0 {
            cold = t.elapsed();
        } else {
            worst = worst.max(t.elapsed());
        }
        assert!(p.live_allocations > 0);
    }
    println!(
        "peak query (grouped live allocations at the peak): cold {:.2} ms, warm worst of 5 {:.2} ms",
        cold.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3
    );
}

fn spool(mib: u64) {
    let dir = tempfile::tempdir().unwrap();
    // Port 9 on loopback: nothing listens, so everything spools.
    let mut fc = ForwarderConfig::new("127.0.0.1:9", "bench", dir.path().into());
    fc.spool_max_bytes = (mib + 64) << 20;
    let fwd = Forwarder::start(fc).unwrap();
    let key = fwd.open_stream("spool");
    let mut buf = Vec::new();
    let mut i = 0u64;
    let before = rss_kib("VmRSS:");
    while fwd.spooled_bytes() < mib << 20 {
        buf.clear();
        encode_record(&Record::Events(gen(i, 4096, 8)), &mut buf).unwrap();
        fwd.push(key, &buf).unwrap();
        i += 4096;
    }
    println!(
        "spooling with the daemon unreachable: {} MiB on disk ({} events); agent RSS now {} KiB, peak {} KiB (before: {} KiB)",
        fwd.spooled_bytes() >> 20,
        i,
        rss_kib("VmRSS:"),
        rss_kib("VmHWM:"),
        before
    );
    let _ = fwd.shutdown(Duration::from_millis(10));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    match args.first().map(String::as_str) {
        Some("spool") => spool(n(1, 512) as u64),
        Some(cmd @ ("ingest" | "query")) => {
            let db = args
                .get(1)
                .cloned()
                .unwrap_or_else(|| "/tmp/memwatch-bench.db".into());
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if cmd == "ingest" {
                    ingest(&db, n(2, 5_000_000)).await
                } else {
                    query(&db, n(2, 10_000_000)).await
                }
            });
        }
        _ => eprintln!("usage: bench ingest|query DB N | bench spool MIB"),
    }
}
