//! Records synthetic captures into a memwatch database through the daemon's own ingest
//! code (for the dashboard's end-to-end test and its render benchmark), and optionally
//! times the dashboard pages for the largest run.
//!
//!   cargo run -p memwatch-daemon --release --example dash_fixture -- DB EVENTS [--bench]
//!   cargo run -p memwatch-daemon --release --example dash_fixture -- DB --framework EXECS BUFFERS
//!
//! The workload: a training-like loop on two GPUs (weights allocated once, activations
//! growing and shrinking each step, one large temporary at a known step), API spans on
//! eight threads, a marker per step, device samples (VRAM and GTT), and a final
//! out-of-memory failure. A second, smaller run is recorded for comparison.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use axum::body::Body;
use axum::http::Request;
use memwatch_daemon::spawn_writer;
use memwatch_daemon::Metrics;
use memwatch_daemon::{router, AppState};
use memwatch_daemon::{spawn_checkpointer, CheckpointSettings};
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{
    DeviceInfo, DeviceSample, Event, EventKind, Marker, MemKind, ProcessEnd, ProcessStart, Record,
};
use tower::ServiceExt;

struct Gen {
    t: u64,
    ptr: u64,
    pid: u32,
}

impl Gen {
    fn ev(&mut self, kind: EventKind, ptr: u64, size: u64, device: i32, tid: u32) -> Event {
        self.t += 800;
        Event {
            ts_ns: self.t,
            ptr,
            size,
            pid: self.pid,
            tid,
            device,
            kind: kind as u8,
            mem_kind: match kind {
                EventKind::Alloc | EventKind::Free | EventKind::AllocFailed => {
                    MemKind::Device as u8
                }
                _ => 0,
            },
            api: 2001,
            duration_ns: 3_000,
            ..Event::default()
        }
    }
    fn alloc(&mut self, size: u64, device: i32, tid: u32) -> (Event, u64) {
        self.ptr += 0x10_0000;
        let p = self.ptr;
        (self.ev(EventKind::Alloc, p, size, device, tid), p)
    }
}

/// Records one run of about `n` events; returns its id.
async fn record_run(
    ing: &mut Ingestor,
    key: &str,
    n: u64,
    pid: u32,
    scale: u64,
    oom: bool,
) -> Result<i64> {
    let t0 = 1_000_000_000u64 + pid as u64 * 1000;
    let mut g = Gen {
        t: t0,
        ptr: (pid as u64) << 40,
        pid,
    };
    let mut seq = 0u64;
    let mut run_id = None;
    let mut recs = vec![Record::ProcessStart(ProcessStart {
        pid,
        ppid: 1,
        mono_anchor_ns: t0,
        wall_anchor_unix_ns: 1_763_700_000_000_000_000 + pid as u64 * 60_000_000_000,
        shim_version: "fixture".into(),
        hostname: "gpu-node-1".into(),
        argv: vec!["python".into(), "train.py".into(), format!("--run={key}")],
        pid_ns: None,
    })];
    for d in 0..2 {
        recs.push(Record::DeviceInfo(DeviceInfo {
            pid,
            device: d,
            vendor: 2,
            total_bytes: 141 << 30,
            name: "NVIDIA H200".into(),
            identity: None,
        }));
    }
    let mut evs: Vec<Event> = Vec::new();
    let mut weights = Vec::new();
    for d in 0..2 {
        for i in 0..16u64 {
            let (e, p) = g.alloc((96 + 8 * i) << 20, d, 1);
            evs.push(e);
            weights.push((p, d));
        }
    }
    let mut emitted = evs.len() as u64;
    let mut step = 0u64;
    let flush = |recs: &mut Vec<Record>, evs: &mut Vec<Event>| {
        if !evs.is_empty() {
            recs.push(Record::Events(std::mem::take(evs)));
        }
    };
    while emitted < n {
        step += 1;
        recs.push(Record::Marker(Marker {
            pid,
            tid: 1,
            ts_ns: g.t,
            device: -1,
            text: format!("step {step}"),
        }));
        // Activations: grow, then free in reverse; one big temporary at step 7.
        let per = (100 + (step % 5) * 40).min(n.saturating_sub(emitted) / 2 + 1);
        let mut live = Vec::new();
        for i in 0..per {
            let d = (i % 2) as i32;
            let size = (scale * (1 + (i * 7919 + step) % 31)) << 18;
            let (e, p) = g.alloc(size, d, 2 + (i % 8) as u32);
            evs.push(e);
            live.push((p, d));
            if i % 25 == 0 {
                let mut s = g.ev(EventKind::ApiSpan, 0, 0, d, 2 + (i % 8) as u32);
                s.aux = 150_000 + (i % 7) * 40_000;
                s.api = 1024;
                evs.push(s);
                g.t += 200_000;
            }
        }
        if step == 7 {
            let (e, p) = g.alloc(scale << 30, 0, 3);
            evs.push(e);
            live.push((p, 0));
        }
        while let Some((p, d)) = live.pop() {
            let e = g.ev(EventKind::Free, p, 0, d, 2);
            evs.push(e);
        }
        emitted += 2 * per + per / 25 + 1;
        if evs.len() >= 200_000 {
            flush(&mut recs, &mut evs);
            seq += 1;
            let out = ing
                .commit(vec![Batch {
                    node: "gpu-node-1".into(),
                    stream: pid as u64,
                    seq,
                    run_key: key.into(),
                    records: std::mem::take(&mut recs),
                }])
                .await?;
            run_id = run_id.or(out[0].run_id);
        }
    }
    if oom {
        let mut f = g.ev(EventKind::AllocFailed, 0, 150 << 30, 0, 3);
        f.result = 2;
        evs.push(f);
    }
    for (p, d) in weights {
        let e = g.ev(EventKind::Free, p, 0, d, 1);
        evs.push(e);
    }
    flush(&mut recs, &mut evs);
    recs.push(Record::ProcessEnd(ProcessEnd {
        pid,
        ts_ns: g.t + 1,
        exit_code: if oom { 1 } else { 0 },
    }));
    // 60 samples spread over the run, then the final ones (the Overview sparkline).
    let step_ns = (g.t - t0) / 61;
    for i in 0..60u64 {
        for (mem, used, total) in [
            (0u8, (5u64 << 30) + (i % 20) * (64 << 20), 141u64 << 30),
            (1, (1 << 30) + (i % 7) * (128 << 20), 64 << 30),
        ] {
            recs.push(Record::DeviceSample(DeviceSample {
                ts_ns: t0 + i * step_ns,
                device: 0,
                memory: mem,
                used_bytes: used,
                total_bytes: total,
                source: "nvml".into(),
            }));
        }
    }
    for (mem, used, total) in [(0u8, 6u64 << 30, 141u64 << 30), (1, 2 << 30, 64 << 30)] {
        recs.push(Record::DeviceSample(DeviceSample {
            ts_ns: g.t,
            device: 0,
            memory: mem,
            used_bytes: used,
            total_bytes: total,
            source: "nvml".into(),
        }));
    }
    recs.push(Record::DeviceSample(DeviceSample {
        ts_ns: g.t,
        device: 1,
        memory: 0,
        used_bytes: 40 << 30,
        total_bytes: 141 << 30,
        source: "nvml".into(),
    }));
    seq += 1;
    let out = ing
        .commit(vec![Batch {
            node: "gpu-node-1".into(),
            stream: pid as u64,
            seq,
            run_key: key.into(),
            records: recs,
        }])
        .await?;
    run_id.or(out[0].run_id).context("no run id")
}

/// A run whose process is still running (no ProcessEnd): the Overview's running list.
async fn record_live(ing: &mut Ingestor) -> Result<i64> {
    let pid = 303;
    let mut g = Gen {
        t: 5_000_000_000,
        ptr: (pid as u64) << 40,
        pid,
    };
    let (e, _) = g.alloc(3 << 30, 0, 1);
    let out = ing
        .commit(vec![Batch {
            node: "gpu-node-1".into(),
            stream: pid as u64,
            seq: 1,
            run_key: "live-job".into(),
            records: vec![
                Record::ProcessStart(ProcessStart {
                    pid,
                    ppid: 1,
                    mono_anchor_ns: 5_000_000_000,
                    wall_anchor_unix_ns: memwatch_daemon::now_unix_ns() as u64,
                    shim_version: "fixture".into(),
                    hostname: "gpu-node-1".into(),
                    argv: vec!["python".into(), "serve.py".into()],
                    pid_ns: None,
                }),
                Record::Events(vec![e]),
            ],
        }])
        .await?;
    out[0].run_id.context("no run id for live-job")
}

/// Attaches the real H200 fixtures (testdata/h200): the OOM incident's log with its
/// XLA dump (`memwatch import --log … --xla-dump …` does the same), and the MLP dump.
async fn attach_h200(store: &Store) -> Result<()> {
    use memwatch_analysis::log::{parse_log, LogReport};
    use memwatch_daemon::NewModule;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/h200")
        .canonicalize()
        .context("testdata/h200 is missing")?;
    let rows = |mods: &[memwatch_analysis::xla::ModuleReport]| -> Result<Vec<NewModule>> {
        mods.iter()
            .map(|m| Ok(NewModule::from_report(m)?))
            .collect()
    };
    let mlp_dir = root.join("xla/h200-jax0.11.2-mlp");
    let mlp = memwatch_analysis::xla::load_dump_dir(&mlp_dir)?;
    store
        .insert_xla_dump(None, &mlp_dir.display().to_string(), &rows(&mlp)?)
        .await?;
    let inc = root.join("incidents/h200-jax0.11.2-oom-temp");
    let mods = memwatch_analysis::xla::load_dump_dir(&inc)?;
    let dump = store
        .insert_xla_dump(None, &inc.display().to_string(), &rows(&mods)?)
        .await?;
    let log_path = inc.join("run.log");
    let text = std::fs::read_to_string(&log_path)
        .with_context(|| format!("{}: cannot read", log_path.display()))?;
    let mut rep = LogReport::default();
    parse_log(text.as_bytes(), &log_path, &mut rep)?;
    let id = store
        .insert_incident_log(
            None,
            Some(dump),
            &log_path.display().to_string(),
            &text,
            Some(0.025),
        )
        .await?;
    println!(
        "attached {} ({} OOM report(s)) as log #{id} with dump #{dump}, and the MLP dump",
        log_path.display(),
        rep.ooms.len()
    );
    Ok(())
}

/// The daemon's router over `store`, as `memwatch serve` builds it, for timing pages.
fn page_router(store: &Store) -> axum::Router {
    let metrics = Arc::new(Metrics::default());
    let (writer, _) = spawn_writer(
        Ingestor::new(store.clone()),
        metrics.clone(),
        memwatch_daemon::IngestLimits::default(),
    );
    router(
        AppState {
            store: store.clone(),
            writer,
            metrics,
            token: None,
        },
        1 << 20,
    )
}

async fn time_page(app: &axum::Router, uri: &str) -> Result<(f64, usize)> {
    let t = Instant::now();
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty())?)
        .await?;
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 31).await?;
    if !status.is_success() {
        bail!("{uri}: HTTP {status}");
    }
    Ok((t.elapsed().as_secs_f64() * 1e3, bytes.len()))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 5 && args[2] == "--framework" {
        let num = |s: &str| {
            s.parse::<u64>()
                .with_context(|| format!("{s:?} is not a number"))
        };
        return bench_framework(&args[1], num(&args[3])?, num(&args[4])?).await;
    }
    if args.len() < 3 {
        bail!(
            "usage: dash_fixture DB EVENTS [--bench] | dash_fixture DB --framework EXECS BUFFERS"
        );
    }
    let db = &args[1];
    let n: u64 = args[2]
        .parse()
        .with_context(|| format!("EVENTS {:?} is not a number", args[2]))?;
    let bench = args.iter().any(|a| a == "--bench");
    let store = Store::open(db).await?;
    let mut ing = Ingestor::new(store.clone());
    let t = Instant::now();
    // EVENTS 0: record nothing, time the pages of a database recorded earlier.
    let (small, big) = if n == 0 {
        (1, 2)
    } else {
        let small = record_run(
            &mut ing,
            "baseline",
            (n / 10).clamp(2_000, 200_000),
            101,
            1,
            false,
        )
        .await?;
        let big = record_run(&mut ing, "train-oom", n, 202, 2, true).await?;
        let secs = t.elapsed().as_secs_f64();
        println!("recorded runs #{small} (baseline) and #{big} (train-oom, ~{n} events) into {db} in {secs:.1} s");
        let live = record_live(&mut ing).await?;
        println!("recorded run #{live} (live-job: a process that has not ended)");
        attach_h200(&store).await?;
        (small, big)
    };
    if bench {
        let app = page_router(&store);
        let pages = [
            "/".to_string(),
            format!("/runs/{big}"),
            format!("/runs/{big}?from=1000000&to=2000000"),
            format!("/runs/{big}/chart.svg?device=0"),
            format!("/runs/{big}/chart.svg?device=0&from=123456789&to=223456789"),
            format!("/runs/{big}/peak?device=0"),
            format!("/compare?a={small}&b={big}"),
            "/incidents".to_string(),
            "/incidents/logs/1".to_string(),
            "/xla".to_string(),
            "/xla/modules/1".to_string(),
            "/xla/modules/3?diff=1".to_string(),
            "/gates".to_string(),
            format!("/runs/{big}/peak?device=0&at=123456789"),
            format!("/api/runs/{big}"),
            format!("/api/runs/{big}/timeline?device=0&points=1100"),
            format!("/api/runs/{big}/timeline?device=0&points=1100&from=123456789&to=223456789"),
            format!("/api/runs/{big}/peak?device=0&top=5000"),
        ];
        let events = store.run(big).await?.map_or(0, |r| r.run.event_count);
        // An instant in the middle of the run: the live set is replayed from the peak
        // snapshot (early in the run) over about half of the run's events.
        let mid = memwatch_daemon::run_lite(&store, big)
            .await?
            .map_or(0, |r| r.duration_ns / 2);
        let pages: Vec<String> = pages
            .into_iter()
            .chain([format!("/runs/{big}/peak?device=0&at={mid}")])
            .collect();
        // `memwatch serve` starts the checkpointer, which catches up on the runs already
        // stored; pages are served meanwhile.
        let mut progress = spawn_checkpointer(store.clone(), CheckpointSettings::default());
        let started = Instant::now();
        for p in ["/".to_string(), format!("/runs/{big}")] {
            let (ms, _) = time_page(&app, &p).await?;
            println!("while the checkpointer catches up: {ms:8.1} ms  {p}");
        }
        progress.wait_for(|p| p.passes >= 1).await?;
        let done = *progress.borrow();
        println!(
            "checkpointer's first pass (background, at daemon start): {:.1} s, {} checkpoints \
             written, {:.1} s after start",
            done.first_pass.as_secs_f64(),
            done.written,
            started.elapsed().as_secs_f64()
        );
        let (ms, _) = time_page(&app, &format!("/runs/{big}/peak?device=0&at={mid}")).await?;
        println!("first 'live at an instant' request after it: {ms:.0} ms");
        println!(
            "page render server time (run #{big}, {events} events), best of 3 after 1 warm-up:"
        );
        for p in &pages {
            let _ = time_page(&app, p).await?;
            let mut best = f64::MAX;
            let mut size = 0;
            for _ in 0..3 {
                let (ms, b) = time_page(&app, p).await?;
                best = best.min(ms);
                size = b;
            }
            println!("  {best:8.1} ms  {size:>8} B  {p}");
        }
    }
    Ok(())
}

/// The framework view's benchmark run: a JAX-like job of `execs` executions of eight
/// executables on GPU 0, each creating `buffers / execs` output buffers and freeing the
/// previous step's (one executable keeps one output per execution: a slow leak), an
/// allocator sample at every execution completion, and compiles at the start. The run,
/// its process and its driver-level pool go through the daemon's ingest; the PJRT rows
/// (millions) are written to their tables directly, as ingest would, in large batches:
/// the benchmark times the framework view's build and pages, not ingest.
async fn record_framework_run(store: &Store, execs: u64, buffers: u64) -> Result<i64> {
    let pid = 404u32;
    let t0 = 9_000_000_000u64;
    let step_ns = 100_000u64;
    let end = t0 + (execs + 10) * step_ns;
    let pool = 60u64 << 30;
    let ev = |ts: u64, kind: EventKind, ptr: u64, size: u64| Event {
        ts_ns: ts,
        ptr,
        size,
        pid,
        tid: 1,
        device: 0,
        kind: kind as u8,
        mem_kind: MemKind::Device as u8,
        api: 2001,
        ..Event::default()
    };
    let mut ing = Ingestor::new(store.clone());
    let out = ing
        .commit(vec![Batch {
            node: "gpu-node-1".into(),
            stream: pid as u64,
            seq: 1,
            run_key: "jax-framework".into(),
            records: vec![
                Record::ProcessStart(ProcessStart {
                    pid,
                    ppid: 1,
                    mono_anchor_ns: t0,
                    wall_anchor_unix_ns: 1_763_800_000_000_000_000,
                    shim_version: "fixture".into(),
                    hostname: "gpu-node-1".into(),
                    argv: vec!["python".into(), "jax_train.py".into()],
                    pid_ns: None,
                }),
                Record::Events(vec![
                    ev(t0 + 1_000, EventKind::Alloc, 0x7f00_0000_0000, pool),
                    ev(end, EventKind::Free, 0x7f00_0000_0000, pool),
                ]),
                Record::ProcessEnd(ProcessEnd {
                    pid,
                    ts_ns: end + 1,
                    exit_code: 0,
                }),
            ],
        }])
        .await?;
    let run = out[0].run_id.context("no run id for jax-framework")?;
    let pool_db = &store.pool;
    let names = [
        "jit_train_step",
        "jit_eval_step",
        "jit_update_ema",
        "jit_accumulate",
        "jit_loss",
        "jit__normal",
        "jit_concatenate",
        "jit_log_metrics",
    ];
    let mut tx = pool_db.begin().await?;
    for (i, name) in names.iter().enumerate() {
        sqlx::query(
            "INSERT INTO pjrt_executables (run_id, pid, handle, ts_ns, flags, devices, name, fingerprint, \
             generated_code_bytes, argument_bytes, output_bytes, alias_bytes, temp_bytes, \
             host_generated_code_bytes, host_argument_bytes, host_output_bytes, host_alias_bytes, host_temp_bytes) \
             VALUES ($1, $2, $3, $4, 0, '0', $5, '', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)",
        )
        .bind(run)
        .bind(pid as i64)
        .bind(0x1000 + i as i64)
        .bind((t0 + 2_000 + i as u64 * 50_000) as i64)
        .bind(*name)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO pjrt_compiles (run_id, pid, api, handle, ts_ns, duration_ns, result) \
             VALUES ($1, $2, 3001, $3, $4, 40000, 0)",
        )
        .bind(run)
        .bind(pid as i64)
        .bind(0x1000 + i as i64)
        .bind((t0 + 2_000 + i as u64 * 50_000) as i64)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    let per = (buffers / execs.max(1)).max(1);
    // Rows of (ptr, size, producer, ts, freed) per execution; written in batches.
    let mut prev: Vec<(i64, i64, i64, i64)> = Vec::new();
    let mut bufs: Vec<(i64, i64, i64, i64, Option<i64>)> = Vec::new();
    let mut runs: Vec<(i64, i64, i64)> = Vec::new();
    let mut ptr = 0x10_0000_0000i64;
    let mut kept = 0i64;
    let flush_rows = |bufs: Vec<(i64, i64, i64, i64, Option<i64>)>, runs: Vec<(i64, i64, i64)>| {
        let pool_db = pool_db.clone();
        async move {
            let mut tx = pool_db.begin().await?;
            for chunk in bufs.chunks(100) {
                let mut q = String::from(
                    "INSERT INTO pjrt_buffers (run_id, pid, device, ptr, size, api, producer, ts_ns, freed_ts_ns) VALUES ",
                );
                for (k, _) in chunk.iter().enumerate() {
                    if k > 0 {
                        q.push(',');
                    }
                    let p = k * 5;
                    q.push_str(&format!(
                        "({run}, {pid}, 0, ${}, ${}, 3006, ${}, ${}, ${})",
                        p + 1,
                        p + 2,
                        p + 3,
                        p + 4,
                        p + 5
                    ));
                }
                let mut query = sqlx::query(&q);
                for b in chunk {
                    query = query.bind(b.0).bind(b.1).bind(b.2).bind(b.3).bind(b.4);
                }
                query.execute(&mut *tx).await?;
            }
            for chunk in runs.chunks(100) {
                let mut q = String::from(
                    "INSERT INTO pjrt_executions (run_id, pid, device, handle, start_ns, call_ns, result, \
                     requested_bytes, complete_ns, complete_result, complete_requested_bytes) VALUES ",
                );
                let mut s = String::from(
                    "INSERT INTO pjrt_memory_stats (run_id, pid, device, ts_ns, flags, bytes_in_use, \
                     peak_bytes_in_use, largest_free_block, pool_bytes, peak_pool_bytes, bytes_limit, \
                     num_allocs, largest_alloc_size) VALUES ",
                );
                for (k, _) in chunk.iter().enumerate() {
                    if k > 0 {
                        q.push(',');
                        s.push(',');
                    }
                    let p = k * 3;
                    q.push_str(&format!(
                        "({run}, {pid}, 0, ${}, ${}, 20000, 0, 0, ${}, 0, 0)",
                        p + 1,
                        p + 2,
                        p + 3
                    ));
                    let p = k * 2;
                    s.push_str(&format!(
                        "({run}, {pid}, 0, ${}, 255, ${}, 0, 0, {pool}, {pool}, {pool}, 0, 0)",
                        p + 1,
                        p + 2
                    ));
                }
                let mut query = sqlx::query(&q);
                let mut stats = sqlx::query(&s);
                for r in chunk {
                    query = query.bind(r.0).bind(r.1).bind(r.1 + 60_000);
                    stats = stats.bind(r.1 + 60_000).bind(r.2);
                }
                query.execute(&mut *tx).await?;
                stats.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok::<(), anyhow::Error>(())
        }
    };
    for x in 0..execs {
        let who = (x % names.len() as u64) as i64;
        let handle = 0x1000 + who;
        let start = (t0 + 500_000 + x * step_ns) as i64;
        let mut live = kept;
        for (p, size, producer, ts) in prev.drain(..) {
            bufs.push((p, size, producer, ts, Some(start + 50_000)));
        }
        for k in 0..per {
            ptr += 0x1000;
            let size = (1i64 << 20) * (1 + ((x + k) % 16) as i64);
            // jit_accumulate keeps its first output: the leak the badge must find.
            if who == 3 && k == 0 {
                bufs.push((ptr, size, handle, start + 40_000, None));
                kept += size;
            } else {
                prev.push((ptr, size, handle, start + 40_000));
            }
            live += size;
        }
        runs.push((handle, start, live));
        if bufs.len() >= 200_000 {
            flush_rows(std::mem::take(&mut bufs), std::mem::take(&mut runs)).await?;
        }
    }
    for (p, size, producer, ts) in prev.drain(..) {
        bufs.push((p, size, producer, ts, Some((end - 1_000) as i64)));
    }
    flush_rows(bufs, runs).await?;
    Ok(run)
}

/// `dash_fixture DB --framework EXECS BUFFERS`: records the framework benchmark run and
/// prints the framework view's build time (the background builder's work) and the run
/// page's server time cold (first request after the build, a freshly opened store) and
/// warm (best of 3).
async fn bench_framework(db: &str, execs: u64, buffers: u64) -> Result<()> {
    let store = Store::open(db).await?;
    let t = Instant::now();
    let run = record_framework_run(&store, execs, buffers).await?;
    println!(
        "framework run #{run}: {execs} executions, {buffers} buffers written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let built = memwatch_daemon::build_framework_view(&store, run).await?;
    println!(
        "framework view build (background, after ingest): {:.1} s, {} records swept, {} rollup rows",
        t.elapsed().as_secs_f64(),
        built.records,
        built.rows
    );
    store.close().await?;
    let store = Store::open(db).await?;
    let app = page_router(&store);
    let pages = [
        format!("/runs/{run}"),
        format!("/api/runs/{run}/framework?device=0"),
        format!("/runs/{run}/framework/stack.svg?device=0&from=1000000000&to=2000000000"),
        "/".to_string(),
    ];
    println!("server time, run #{run} with the framework view (cold: first request on a newly opened store):");
    for p in &pages {
        let (cold, size) = time_page(&app, p).await?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            best = best.min(time_page(&app, p).await?.0);
        }
        println!("  cold {cold:8.1} ms  warm {best:8.1} ms  {size:>8} B  {p}");
    }
    Ok(())
}
