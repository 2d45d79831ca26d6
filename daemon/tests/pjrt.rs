//! PJRT runtime records (issue 9) through ingest, storage and the API, on SQLite and
//! (when MEMWATCH_TEST_POSTGRES_URL is set) PostgreSQL: executables, executions,
//! allocator samples and buffers are stored; `/runtime` and `/peak` name the executable at
//! the runtime peak; an attached XLA dump (the real H200 `jit_mlp` dump) groups the peak by
//! module and HLO op_name; a failed execute is an incident; bad attach bodies are refused.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{
    Api, CompiledMemoryStats, Event, EventKind, MemKind, PjrtExecutable, PjrtMemoryStats, Record,
};
use tower::ServiceExt;

const MIB: u64 = 1 << 20;
const T0: u64 = 5_000_000_000;

async fn app(url: &str) -> (axum::Router, Store) {
    test_app(url, None, 64 << 20).await
}

async fn call(app: &axum::Router, req: Request<Body>) -> (StatusCode, serde_json::Value) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, v)
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, serde_json::Value) {
    call(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

async fn post(app: &axum::Router, uri: &str, body: Vec<u8>) -> (StatusCode, serde_json::Value) {
    call(
        app,
        Request::post(uri)
            .header("content-type", "application/octet-stream")
            .body(Body::from(body))
            .unwrap(),
    )
    .await
}

fn exe(handle: u64, name: &str, arg: i64, out: i64, temp: i64) -> Record {
    Record::PjrtExecutable(PjrtExecutable {
        pid: 42,
        ts_ns: T0 + 10,
        handle,
        flags: PjrtExecutable::FLAG_STATS,
        stats: CompiledMemoryStats {
            argument: arg,
            output: out,
            temp,
            generated_code: 4096,
            ..CompiledMemoryStats::default()
        },
        devices: vec![0],
        name: name.into(),
        fingerprint: format!("fp-{name}"),
    })
}

fn stats(ts: u64, in_use: u64, peak: u64) -> Record {
    Record::PjrtMemoryStats(PjrtMemoryStats {
        pid: 42,
        ts_ns: T0 + ts,
        device: 0,
        flags: 0b0010_1111,
        bytes_in_use: in_use as i64,
        peak_bytes_in_use: peak as i64,
        largest_free_block: (1024 * MIB - in_use) as i64,
        pool_bytes: (1024 * MIB) as i64,
        bytes_limit: (1024 * MIB) as i64,
        ..PjrtMemoryStats::default()
    })
}

fn span(api: Api, ts: u64, dur: u64, handle: u64, result: i32, size: u64) -> Event {
    Event {
        ts_ns: T0 + ts,
        duration_ns: dur,
        ptr: handle,
        size,
        result,
        pid: 42,
        tid: 7,
        device: 0,
        api: api as u16,
        kind: EventKind::ApiSpan as u8,
        ..Event::default()
    }
}

fn buffer(ts: u64, ptr: u64, size: u64, producer: u64) -> Event {
    Event {
        ts_ns: T0 + ts,
        ptr,
        size,
        aux: producer,
        pid: 42,
        tid: 7,
        device: 0,
        api: Api::PjrtExecuteOutput as u16,
        kind: EventKind::Alloc as u8,
        mem_kind: MemKind::PjrtBuffer as u8,
        ..Event::default()
    }
}

/// `jit_init` makes 64 MiB of parameters; `jit_mlp` (the H200 dump's compiled statistics)
/// runs with them live; its completion arrives in a later batch; a later `jit_mlp` fails
/// with RESOURCE_EXHAUSTED through its completion event.
fn batches() -> Vec<Batch> {
    let pool = Event {
        ts_ns: T0 + 5,
        ptr: 0x7f00_0000_0000,
        size: 1024 * MIB,
        pid: 42,
        tid: 7,
        device: 0,
        api: Api::CuMemAlloc as u16,
        kind: EventKind::Alloc as u8,
        mem_kind: MemKind::Device as u8,
        ..Event::default()
    };
    let mut freed = buffer(500, 0x900, 2 * MIB, 0xa);
    freed.kind = EventKind::Free as u8;
    freed.device = -1;
    freed.api = Api::PjrtBufferDestroy as u16;
    let one = vec![
        start(42, T0),
        exe(0xa, "jit_init", 0, 64 * MIB as i64, 0),
        exe(0xb, "jit_mlp", 71_303_168, 67_108_938, 239_103_760),
        Record::Events(vec![pool]),
        stats(100, 0, 0),
        Record::Events(vec![
            span(Api::PjrtExecute, 150, 50, 0xa, 0, 0),
            buffer(160, 0x100, 65 * MIB, 0xa),
            buffer(170, 0x900, 2 * MIB, 0xa),
            span(Api::PjrtExecute, 400, 20, 0xb, 0, 0),
            buffer(410, 0x200, 67_108_938, 0xb),
        ]),
        stats(300, 66 * MIB, 66 * MIB),
    ];
    let two = vec![
        Record::Events(vec![
            span(Api::PjrtExecuteComplete, 400, 150, 0xb, 0, 0),
            freed,
        ]),
        stats(
            600,
            66 * MIB + 67_108_938,
            66 * MIB + 67_108_938 + 239_103_760,
        ),
        Record::Events(vec![
            span(Api::PjrtExecute, 950, 5, 0xb, 0, 0),
            span(Api::PjrtExecuteComplete, 950, 40, 0xb, 8, 239_104_000),
            // a buffer made and freed within one frame
            buffer(960, 0x300, MIB, 0xa),
            Event {
                ts_ns: T0 + 970,
                kind: EventKind::Free as u8,
                device: -1,
                api: Api::PjrtBufferDestroy as u16,
                ..buffer(970, 0x300, 0, 0)
            },
        ]),
    ];
    [one, two]
        .into_iter()
        .enumerate()
        .map(|(i, records)| Batch {
            node: "gpu-node".into(),
            stream: 5,
            seq: i as u64 + 1,
            run_key: "pjrt-run".into(),
            records,
        })
        .collect()
}

fn h200_mlp_dump() -> Vec<memwatch_analysis::xla::ModuleReport> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/h200/xla/h200-jax0.11.2-mlp");
    memwatch_analysis::xla::load_dump_dir(&dir).unwrap()
}

#[tokio::test]
async fn pjrt_records_are_stored_and_attributed() {
    for url in dbs("pjrt_records").await.urls {
        let (app, store) = app(&url).await;
        let mut ing = Ingestor::new(store.clone());
        let mut run = None;
        for b in batches() {
            for o in ing.commit(vec![b]).await.unwrap() {
                run = run.or(o.run_id);
            }
        }
        let run = run.unwrap();
        // a resent batch stores nothing twice
        let again = ing.commit(vec![batches().remove(1)]).await.unwrap();
        assert!(again[0].duplicate);

        let count = |table: &'static str| {
            let store = store.clone();
            async move {
                let row = sqlx::query(&format!("SELECT COUNT(*) FROM {table} WHERE run_id = $1"))
                    .bind(run)
                    .fetch_one(&store.pool)
                    .await
                    .unwrap();
                memwatch_daemon::col_i64(&row, 0).unwrap()
            }
        };
        // Modules of the XLA dumps attached to the run.
        let modules_of_run = || {
            let store = store.clone();
            async move {
                let row = sqlx::query(
                    "SELECT COUNT(*) FROM xla_dump_modules m JOIN xla_dumps d \
                     ON d.id = m.dump_id WHERE d.run_id = $1",
                )
                .bind(run)
                .fetch_one(&store.pool)
                .await
                .unwrap();
                memwatch_daemon::col_i64(&row, 0).unwrap()
            }
        };
        assert_eq!(count("pjrt_executables").await, 2, "{url}");
        assert_eq!(count("pjrt_executions").await, 3, "{url}");
        assert_eq!(count("pjrt_memory_stats").await, 3, "{url}");
        assert_eq!(count("pjrt_buffers").await, 4, "{url}");
        let freed = sqlx::query(
            "SELECT COUNT(*) FROM pjrt_buffers WHERE run_id = $1 AND freed_ts_ns IS NOT NULL",
        )
        .bind(run)
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert_eq!(memwatch_daemon::col_i64(&freed, 0).unwrap(), 2, "{url}");

        let (s, v) = get(&app, &format!("/api/runs/{run}/runtime?device=0")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["samples"], 3);
        assert_eq!(v["timeline"][2]["pool_bytes"], 1024 * MIB);
        assert_eq!(v["execution_count"], 3);
        let ex = &v["executions"][1];
        assert_eq!(ex["executable"], "jit_mlp");
        assert_eq!(
            (ex["start_ns"].as_u64(), ex["end_ns"].as_u64()),
            (Some(400), Some(550))
        );
        assert_eq!(ex["completed"], true);
        assert_eq!(v["executions"][2]["result"], 8);
        assert_eq!(v["peak"]["executable"], "jit_mlp");
        assert_eq!(v["peak"]["ts_ns"], 600);
        assert_eq!(v["peak_executable"]["name"], "jit_mlp");
        assert_eq!(v["peak_executable"]["temp_bytes"], 239_103_760);
        assert_eq!(v["peak_executable"]["fingerprint"], "fp-jit_mlp");
        assert_eq!(v["ooms"][0]["executable"], "jit_mlp");
        assert_eq!(v["ooms"][0]["request_is_temp_buffer"], true);
        assert_eq!(v["xla_modules_attached"], 0);
        let (_, thin) = get(
            &app,
            &format!("/api/runs/{run}/runtime?device=0&points=2&limit=1"),
        )
        .await;
        assert_eq!(thin["timeline"].as_array().unwrap().len(), 2);
        assert_eq!(
            thin["timeline"][1]["peak_bytes_in_use"],
            66 * MIB + 67_108_938 + 239_103_760,
            "the downsampled timeline keeps the peak sample"
        );
        assert_eq!(thin["executions"].as_array().unwrap().len(), 1);

        let (s, p) = get(&app, &format!("/api/runs/{run}/peak?device=0")).await;
        assert_eq!(s, StatusCode::OK, "{p}");
        assert_eq!(
            p["peak_bytes"],
            1024 * MIB,
            "the driver-level peak stays as it was"
        );
        let rt = &p["runtime"];
        assert_eq!(rt["executable"], "jit_mlp");
        assert_eq!(rt["pool_bytes"], 1024 * MIB);
        assert_eq!(
            rt["largest_free_block_bytes"],
            1024 * MIB - (66 * MIB + 67_108_938)
        );
        assert_eq!(rt["running_temp_bytes"], 239_103_760);
        assert_eq!(rt["co_resident"][0]["producer"], "jit_init");
        assert_eq!(
            rt["co_resident"][0]["bytes"],
            65 * MIB,
            "the freed buffer is not live"
        );
        assert_eq!(rt["by_xla_module"][0]["module"], "jit_mlp");
        assert_eq!(rt["by_xla_module"][0]["role"], "temp");
        assert!(rt["by_hlo_op"].as_array().unwrap().is_empty());

        // Attach the real H200 dump of jit_mlp: joined by name and statistics.
        let mods = h200_mlp_dump();
        let n = mods.len() as i64;
        assert!(mods.iter().any(|m| m.name == "jit_mlp"));
        let doc = serde_json::json!({ "modules": mods });
        let body = serde_json::to_vec(&doc).unwrap();
        let (s, a) = post(&app, &format!("/api/runs/{run}/xla"), body.clone()).await;
        assert_eq!(s, StatusCode::OK, "{a}");
        assert_eq!(a["modules"], n);
        // attaching again replaces, it does not duplicate
        post(&app, &format!("/api/runs/{run}/xla"), body).await;
        assert_eq!(count("xla_dumps").await, 1);
        assert_eq!(modules_of_run().await, n);
        let (_, p) = get(&app, &format!("/api/runs/{run}/peak?device=0&top=5")).await;
        let rt = &p["runtime"];
        assert_eq!(rt["xla_module"], "jit_mlp");
        assert_eq!(rt["matched_by"], "name+stats");
        assert_eq!(rt["hlo_buffers"].as_array().unwrap().len(), 5);
        let ops = rt["by_hlo_op"].as_array().unwrap();
        assert!(
            !ops.is_empty() && ops[0]["bytes"].as_u64().unwrap() > 0,
            "{rt}"
        );
        // By op category: every buffer of the module's peak once, so the categories add
        // up to the module's peak bytes in the attached dump.
        let cats = rt["by_hlo_category"].as_array().unwrap();
        let cat_sum: u64 = cats.iter().map(|g| g["bytes"].as_u64().unwrap()).sum();
        let module_peak: i64 = sqlx::query_scalar(
            "SELECT COALESCE(m.peak_bytes, m.total_allocation_bytes) FROM xla_dump_modules m \
             JOIN xla_dumps d ON d.id = m.dump_id WHERE d.run_id = $1 AND m.name = 'jit_mlp'",
        )
        .bind(run)
        .fetch_one(&store.pool)
        .await
        .unwrap();
        assert!(!cats.is_empty(), "{rt}");
        assert_eq!(cat_sum, module_peak as u64, "{cats:?}");
        let (_, v) = get(&app, &format!("/api/runs/{run}/runtime?device=0")).await;
        assert_eq!(v["peak"]["xla"]["module"], "jit_mlp");
        assert_eq!(v["xla_modules_attached"], n);

        // The dashboard's Peak page shows the executable, the BFC numbers and the HLO ops.
        let resp = app
            .clone()
            .oneshot(
                Request::get(format!("/runs/{run}/peak?device=0"))
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let html = axum::body::to_bytes(resp.into_body(), 1 << 30)
            .await
            .unwrap();
        let html = String::from_utf8_lossy(&html);
        for needle in [
            "Runtime attribution (PJRT)",
            "<code>jit_mlp</code>",
            "BFC bytes in use (peak)",
            "1.00 GiB",
            "HLO at the peak of <code>jit_mlp</code>",
            "HLO op category",
            "jit_init",
        ] {
            assert!(html.contains(needle), "peak page lacks {needle:?}");
        }
        let first_op = ops[0]["key"].as_str().unwrap().to_string();
        assert!(
            html.contains(&first_op) || first_op.contains('&') || first_op.contains('<'),
            "peak page lacks op {first_op:?}"
        );

        // The failed execute is an incident with the allocator's bytes in use.
        let (_, inc) = get(&app, &format!("/api/incidents?run={run}")).await;
        let inc = inc["incidents"].as_array().unwrap();
        let oom = inc
            .iter()
            .find(|i| i["api"] == "PJRT_LoadedExecutable_Execute:complete")
            .unwrap_or_else(|| panic!("{inc:?}"));
        assert_eq!(oom["result"], 8);
        assert_eq!(oom["size"], 239_104_000);
        assert_eq!(oom["live_bytes"], 66 * MIB + 67_108_938);

        // Bad input: clear errors, nothing stored.
        let (s, e) = post(&app, &format!("/api/runs/{run}/xla"), b"{not json".to_vec()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(e["error"].as_str().unwrap().contains("xla report"), "{e}");
        let (s, _) = post(
            &app,
            &format!("/api/runs/{run}/xla"),
            b"{\"modules\":[]}".to_vec(),
        )
        .await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        let (s, _) = post(
            &app,
            "/api/runs/999999/xla",
            serde_json::to_vec(&doc).unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert_eq!(count("xla_dumps").await, 1);
        assert_eq!(modules_of_run().await, n);
        let (s, _) = get(&app, "/api/runs/999999/runtime").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        let (s, _) = get(&app, &format!("/api/runs/{run}/runtime?points=0")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        // A device without PJRT records: an empty view, and no `runtime` in its peak.
        let (s, v) = get(&app, &format!("/api/runs/{run}/runtime?device=3")).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["samples"], 0);
        assert!(v["peak"].is_null());
    }
}

#[tokio::test]
async fn runs_without_pjrt_records_keep_their_peak_document() {
    for url in dbs("pjrt_absent").await.urls {
        let (app, store) = app(&url).await;
        let mut ing = Ingestor::new(store.clone());
        let out = ing
            .commit(vec![Batch {
                node: "n".into(),
                stream: 1,
                seq: 1,
                run_key: "plain".into(),
                records: vec![start(42, 1000), Record::Events(workload(500, 1000, 1, 3))],
            }])
            .await
            .unwrap();
        let run = out[0].run_id.unwrap();
        let (s, p) = get(&app, &format!("/api/runs/{run}/peak?device=0")).await;
        assert_eq!(s, StatusCode::OK);
        assert!(p.get("runtime").is_none(), "{p}");
        assert!(p["by_kind"].is_array());
    }
}
