//! Dashboard render tests: a synthetic capture is ingested through the daemon's own
//! ingest code into SQLite, then every page is requested with `tower::ServiceExt::oneshot`
//! and its content checked.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{DeviceInfo, DeviceSample, EventKind, Marker, ProcessEnd, Record};
use tower::ServiceExt;

async fn app(url: &str) -> (axum::Router, Store) {
    test_app(url, None, 1 << 20).await
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, String, axum::http::HeaderMap) {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    (
        status,
        String::from_utf8_lossy(&bytes).into_owned(),
        headers,
    )
}

/// Two runs: "train" (2 GPUs, spans, a marker, an OOM, samples with VRAM and GTT) and
/// "eval" (one GPU, ended). Returns the run ids.
async fn record(store: &Store) -> (i64, i64) {
    let mut ing = Ingestor::new(store.clone());
    let t0 = 5_000_000u64;
    let events = workload(30_000, t0, 2, 11);
    // Recorded now (a live run is one whose own events are recent on the wall clock).
    let now_start = match start(42, t0) {
        Record::ProcessStart(p) => Record::ProcessStart(memwatch_wire::ProcessStart {
            wall_anchor_unix_ns: memwatch_daemon::now_unix_ns() as u64,
            ..p
        }),
        other => other,
    };
    let mut recs = vec![
        now_start,
        Record::DeviceInfo(DeviceInfo {
            pid: 42,
            device: 0,
            vendor: 1,
            total_bytes: 128 << 30,
            name: "AMD Radeon 8060S (Strix Halo)".into(),
            identity: None,
        }),
        Record::DeviceSample(DeviceSample {
            ts_ns: t0 + 10,
            device: 0,
            memory: 0,
            used_bytes: 20 << 30,
            total_bytes: 64 << 30,
            source: "amdgpu-sysfs".into(),
        }),
        Record::DeviceSample(DeviceSample {
            ts_ns: t0 + 10,
            device: 0,
            memory: 1,
            used_bytes: 3 << 30,
            total_bytes: 32 << 30,
            source: "amdgpu-sysfs".into(),
        }),
        Record::Marker(Marker {
            pid: 42,
            tid: 7,
            ts_ns: t0 + 2,
            device: 0,
            text: "step <1> & warmup".into(),
        }),
    ];
    for c in events.chunks(4000) {
        recs.push(Record::Events(c.to_vec()));
    }
    let last = events.last().unwrap().ts_ns;
    let mut spans = Vec::new();
    for i in 0..40u64 {
        let mut s = ev(t0 + 1_000 + i * 5_000_000, EventKind::ApiSpan, 0, 0, 0);
        s.tid = 7 + (i % 3) as u32;
        s.aux = 2_000_000;
        s.api = 1;
        spans.push(s);
    }
    recs.push(Record::Events(spans));
    let mut fail = ev(last + 10, EventKind::AllocFailed, 0, 1 << 40, 1);
    fail.result = 2;
    recs.push(Record::Events(vec![fail]));
    let out = ing
        .commit(vec![Batch {
            node: "gpu-node-1".into(),
            stream: 1,
            seq: 1,
            run_key: "train".into(),
            records: recs,
        }])
        .await
        .unwrap();
    let train = out[0].run_id.unwrap();

    let t1 = 9_000_000u64;
    let ev2 = workload(5_000, t1, 1, 5);
    let mut recs = vec![start(43, t1)];
    for e in &ev2 {
        let mut e = *e;
        e.pid = 43;
        recs.push(Record::Events(vec![e]));
    }
    recs.push(Record::ProcessEnd(ProcessEnd {
        pid: 43,
        ts_ns: ev2.last().unwrap().ts_ns + 1,
        exit_code: 0,
    }));
    let out = ing
        .commit(vec![Batch {
            node: "gpu-node-1".into(),
            stream: 2,
            seq: 1,
            run_key: "eval".into(),
            records: recs,
        }])
        .await
        .unwrap();
    (train, out[0].run_id.unwrap())
}

#[tokio::test]
async fn empty_database_explains_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let (app, _) = app(&dir.path().join("e.db").display().to_string()).await;
    let (st, body, _) = get(&app, "/").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("No data yet"), "{body}");
    assert!(body.contains("memwatch run --db"));
    assert!(body.contains("memwatch import"));
    for (uri, text) in [
        ("/compare", "at least two runs"),
        ("/incidents", "No failed allocations"),
        ("/incidents", "No log is attached"),
        ("/xla", "No XLA dump is stored"),
        ("/gates", "No gate results are stored"),
    ] {
        let (st, body, _) = get(&app, uri).await;
        assert_eq!(st, StatusCode::OK, "{uri}");
        assert!(body.contains(text), "{uri}: {body}");
    }
}

#[tokio::test]
async fn every_page_renders_recorded_data() {
    let dir = tempfile::tempdir().unwrap();
    let (app, store) = app(&dir.path().join("w.db").display().to_string()).await;
    let (train, eval) = record(&store).await;

    let (st, body, _) = get(&app, "/").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("gpu-node-1"));
    assert!(body.contains("AMD Radeon 8060S"));
    assert!(
        body.contains(">VRAM<") && body.contains(">GTT<"),
        "VRAM and GTT separately"
    );
    assert!(body.contains("20.00 GiB / 64.00 GiB") && body.contains("3.00 GiB / 32.00 GiB"));
    // "train" is still sending (its failed allocation is in the failures column): its
    // status is live until it ends; "eval" exited 0.
    assert!(body.contains("class=\"badge live\">live<"), "live badge");
    assert!(body.contains("class=\"badge ok\">ok<"), "ok badge");
    let runs = &body[body.find("id=\"runs-h\"").unwrap()..];
    let ti = runs.find(&format!("#{train} train")).unwrap();
    let ei = runs.find(&format!("#{eval} eval")).unwrap();
    assert!(ei < ti, "newest run first");

    let (st, body, _) = get(&app, &format!("/runs/{train}")).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        body.matches("<svg").count(),
        3,
        "two device charts + span lanes"
    );
    assert!(body.contains("peak "), "peak marked");
    assert!(
        body.contains("failed allocation (1 here, 1 in run)"),
        "failure marked on GPU 1"
    );
    assert!(body.contains("API calls on 3 threads"), "{body}");
    assert!(
        body.contains("42/7") && body.contains("42/9"),
        "lane names (pid/tid)"
    );
    assert!(
        body.contains("step &lt;1&gt; &amp; warmup"),
        "annotation escaped"
    );
    assert!(!body.contains("step <1>"));
    assert!(body.contains("/export/perfetto.json"));
    assert!(
        body.contains("device used (VRAM samples)"),
        "the device's own used VRAM drawn next to live bytes"
    );

    let (st, body, h) = get(
        &app,
        &format!("/runs/{train}/chart.svg?device=0&from=1000&to=50000000"),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.starts_with("<svg"));
    let l: i32 = h["x-plot-left"].to_str().unwrap().parse().unwrap();
    let r: i32 = h["x-plot-right"].to_str().unwrap().parse().unwrap();
    assert!(l > 0 && r > l);

    let (st, body, _) = get(&app, &format!("/runs/{train}/lanes?from=0&to=10000000")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("<svg"), "{body}");

    let (st, body, _) = get(&app, &format!("/runs/{train}/peak?device=0")).await;
    assert_eq!(st, StatusCode::OK);
    for dim in [
        "By size class",
        "By memory kind",
        "By thread",
        "By annotation",
    ] {
        assert!(body.contains(dim), "{dim}");
    }
    assert!(body.contains("<details>"));
    assert!(body.contains("pid 42 tid 7"));
    let api: serde_json::Value = {
        let (_, j, _) = get(&app, &format!("/api/runs/{train}/peak?device=0")).await;
        serde_json::from_str(&j).unwrap()
    };
    let n = api["live_allocations"].as_u64().unwrap();
    assert!(
        body.contains(&format!("<dd>{n}</dd>")),
        "live allocation count shown"
    );

    let (st, body, _) = get(&app, &format!("/compare?a={eval}&b={train}")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("Peak composition"));
    assert!(body.contains("By memory kind"));

    let (st, body, _) = get(&app, "/incidents").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("1.00 TiB"), "the failed 1 TiB request");

    for uri in [
        "/xla",
        "/gates",
        "/static/memwatch.css",
        "/static/memwatch.js",
    ] {
        let (st, _, _) = get(&app, uri).await;
        assert_eq!(st, StatusCode::OK, "{uri}");
    }
}

#[tokio::test]
async fn exports_follow_the_documented_formats() {
    let dir = tempfile::tempdir().unwrap();
    let (app, store) = app(&dir.path().join("x.db").display().to_string()).await;
    let (train, _) = record(&store).await;

    // PNG of the timeline: a real PNG at twice the SVG's 1200x320 pixels.
    let resp = app
        .clone()
        .oneshot(
            Request::get(format!("/runs/{train}/export/chart.png?device=0"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "image/png");
    let png = axum::body::to_bytes(resp.into_body(), 1 << 26)
        .await
        .unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 2400);
    assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 640);
    let (st, _, _) = get(&app, "/gates?format=png").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "no gate chart to export yet");

    let (st, body, h) = get(&app, &format!("/runs/{train}/export/trace.jsonl?device=0")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(h["content-disposition"]
        .to_str()
        .unwrap()
        .contains("attachment"));
    let mut live = std::collections::HashMap::new();
    let mut cur = 0i64;
    let mut peak = 0i64;
    for line in body.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["id"].as_u64().unwrap();
        match v["op"].as_str().unwrap() {
            "alloc" => {
                let s = v["size"].as_i64().unwrap();
                assert!(live.insert(id, s).is_none(), "ids are unique");
                cur += s;
                peak = peak.max(cur);
            }
            "free" => cur -= live.remove(&id).expect("free of a known id"),
            op => panic!("unexpected op {op}"),
        }
    }
    let (_, run, _) = get(&app, &format!("/api/runs/{train}")).await;
    let run: serde_json::Value = serde_json::from_str(&run).unwrap();
    assert_eq!(
        peak,
        run["devices"][0]["peak_bytes"].as_i64().unwrap(),
        "trace replays to the stored peak"
    );

    let (st, body, _) = get(&app, &format!("/runs/{train}/export/perfetto.json")).await;
    assert_eq!(st, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "C" && e["args"]["bytes"].is_i64()));
    assert!(evs
        .iter()
        .any(|e| e["ph"] == "X" && e["cat"] == "api_span" && e["dur"].as_f64().unwrap() == 2000.0));
    assert!(evs.iter().any(|e| e["ph"] == "i"), "the failed allocation");

    let (st, body, _) = get(&app, &format!("/runs/{train}/export/chart.svg?device=1")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.starts_with("<svg"));
}

#[tokio::test]
async fn bad_requests_get_clear_pages() {
    let dir = tempfile::tempdir().unwrap();
    let (app, store) = app(&dir.path().join("b.db").display().to_string()).await;
    let (train, _) = record(&store).await;
    let (st, body, _) = get(&app, "/runs/999").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(body.contains("no run #999"));
    let (st, body, _) = get(&app, &format!("/runs/{train}?from=50&to=10")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(body.contains("must be greater than"));
    // Parameters that do not parse get the same HTML error page, naming the parameter.
    for (uri, named) in [
        (format!("/runs/{train}?from=abc"), "from: invalid digit"),
        ("/runs/abc".to_string(), "Cannot parse `abc`"),
        (
            format!("/runs/{train}/peak?device=x"),
            "device: invalid digit",
        ),
        ("/xla/modules/1.5".to_string(), "Cannot parse `1.5`"),
    ] {
        let (st, body, headers) = get(&app, &uri).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{uri}");
        assert!(
            headers[axum::http::header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html"),
            "{uri}"
        );
        assert!(body.contains("Bad request"), "{uri}: {body}");
        assert!(body.contains(named), "{uri}: {body}");
    }
    let (st, body, _) = get(&app, &format!("/runs/{train}/peak?device=9")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("No peak snapshot is stored for GPU 9"));
}

#[tokio::test]
async fn live_run_streams_progress_then_the_page_shows_it() {
    use futures_util::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let (app, store) = app(&dir.path().join("l.db").display().to_string()).await;
    let (train, eval) = record(&store).await;
    // "train" has no process end and its node just sent data: live. "eval" ended.
    let (_, body, _) = get(&app, &format!("/runs/{train}")).await;
    assert!(body.contains("data-active=\"true\"") && body.contains("id=\"live-badge\""));
    let (_, body, _) = get(&app, &format!("/runs/{eval}")).await;
    assert!(body.contains("data-active=\"false\""));

    let resp = app
        .clone()
        .oneshot(
            Request::get(format!("/runs/{train}/live"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = resp.into_body().into_data_stream();
    // More events arrive for the same run.
    let mut ing = Ingestor::new(store.clone());
    let more = workload(500, 900_000_000_000, 1, 3);
    ing.commit(vec![Batch {
        node: "gpu-node-1".into(),
        stream: 1,
        seq: 2,
        run_key: "train".into(),
        records: vec![Record::Events(more)],
    }])
    .await
    .unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    while !seen.contains("event: progress") {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("hung: no progress event")
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("\"events\":"), "{seen}");
}

/// Stores the real H200 OOM incident (log + dump) and the MLP dump as `memwatch import
/// --log/--xla-dump` does; returns (log id, incident module id, an MLP module id).
async fn attach_h200(store: &Store) -> (i64, i64, i64) {
    use memwatch_daemon::NewModule;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/h200");
    let rows = |dir: &std::path::Path| -> Vec<NewModule> {
        memwatch_analysis::xla::load_dump_dir(dir)
            .unwrap()
            .iter()
            .map(|m| NewModule::from_report(m).unwrap())
            .collect()
    };
    let inc = root.join("incidents/h200-jax0.11.2-oom-temp");
    let dump = store
        .insert_xla_dump(None, "incident", &rows(&inc))
        .await
        .unwrap();
    let mlp = store
        .insert_xla_dump(None, "mlp", &rows(&root.join("xla/h200-jax0.11.2-mlp")))
        .await
        .unwrap();
    let text = std::fs::read_to_string(inc.join("run.log")).unwrap();
    let log = store
        .insert_incident_log(None, Some(dump), "run.log", &text, Some(0.025))
        .await
        .unwrap();
    let m = store.dump_modules(Some(dump)).await.unwrap();
    let other = store.dump_modules(Some(mlp)).await.unwrap();
    (log, m[0].id, other[0].id)
}

#[tokio::test]
async fn incident_xla_gate_pages_and_live_at_an_instant() {
    // SQLite always; PostgreSQL too when MEMWATCH_TEST_POSTGRES_URL is set.
    let dbs = dbs("dashpages").await;
    for url in &dbs.urls {
        incident_xla_gate_pages_and_live_at_an_instant_on(url).await;
    }
}

async fn incident_xla_gate_pages_and_live_at_an_instant_on(url: &str) {
    let (app, store) = app(url).await;
    let (train, eval) = record(&store).await;
    let (log, module, other) = attach_h200(&store).await;

    // Incident: the real OOM, diagnosed with its dump.
    let (st, body, _) = get(&app, "/incidents").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains(&format!("/incidents/logs/{log}")), "{body}");
    let (st, body, _) = get(&app, &format!("/incidents/logs/{log}")).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.contains("3489675008"), "the rounded request");
    assert!(
        body.contains("jit_model&#39;s preallocated temp buffer"),
        "matched to the temp buffer: {body}"
    );
    assert!(body.contains("jit__normal"), "what was live, by executable");
    assert!(body.contains("BFC pool chunk map") && body.contains("failed request"));
    assert!(
        body.contains("Not fragmentation"),
        "free space is too small overall"
    );
    assert!(body.contains("Suggested fixes"));
    let (_, j, _) = get(&app, &format!("/incidents/logs/{log}?format=json")).await;
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["diagnoses"][0]["requested_bytes"], 3489675008u64);
    assert_eq!(
        v["diagnoses"][0]["matched"]["what"],
        "preallocated temp buffer"
    );
    let (st, _, _) = get(&app, "/incidents/logs/999").await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // XLA module: composition, top buffers, diff.
    let (st, body, _) = get(&app, "/xla").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("jit_model") && body.contains("jit_mlp"));
    let (st, body, _) = get(&app, &format!("/xla/modules/{module}")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("Buffer composition at peak"));
    assert_eq!(body.matches("<svg").count(), 3, "kind, category, op name");
    assert!(body.contains("bf16[16384,8192]"), "shapes of top buffers");
    assert!(body.contains("jit(model)/jvp()/dot_general"), "op names");
    let (st, body, _) = get(&app, &format!("/xla/modules/{module}?diff={other}")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("Base: module"), "{body}");
    assert!(body.contains("Temporaries"));
    let (st, _, _) = get(&app, &format!("/xla/modules/{module}?format=xml")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);

    // Gate history: one chart per entry.
    let res = |passed, measured| memwatch_daemon::GateResult {
        run_id: Some(train),
        name: "train/device0".into(),
        passed,
        measured_bytes: measured,
        limit_bytes: 1 << 30,
        report_json: "{}".into(),
    };
    store
        .record_gate_results(&[res(true, 900 << 20)])
        .await
        .unwrap();
    store
        .record_gate_results(&[res(false, 1200 << 20)])
        .await
        .unwrap();
    let (st, body, _) = get(&app, "/gates").await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("train/device0") && body.contains("2 result(s), 1 failed"));
    assert_eq!(body.matches("<svg").count(), 1);

    // What was live at an instant: replaying to the peak's instant gives the peak.
    let (_, j, _) = get(&app, &format!("/api/runs/{train}/peak?device=0")).await;
    let peak: serde_json::Value = serde_json::from_str(&j).unwrap();
    let t = peak["peak_ts_ns"].as_u64().unwrap();
    let (st, j, _) = get(
        &app,
        &format!("/runs/{train}/peak?device=0&at={t}&format=json"),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{j}");
    let at: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(at["live"]["peak_bytes"], peak["peak_bytes"]);
    // The page's per-interval annotation lookup agrees with the API's full scan, with
    // markers of two pids spread over the run (added straight into the table).
    let t0: i64 = sqlx::query_scalar("SELECT t0_mono_ns FROM runs WHERE id = $1")
        .bind(train)
        .fetch_one(&store.pool)
        .await
        .unwrap();
    for k in 0..40i64 {
        sqlx::query(
            "INSERT INTO annotations (run_id, pid, tid, ts_ns, device, text) VALUES ($1, $2, 1, $3, -1, $4)",
        )
        .bind(train)
        .bind(if k % 3 == 0 { 43i64 } else { 42 })
        .bind(t0 + k * (t as i64) / 20)
        .bind(format!("phase {}", k % 7))
        .execute(&store.pool)
        .await
        .unwrap();
    }
    let (_, j, _) = get(&app, &format!("/api/runs/{train}/peak?device=0")).await;
    let peak: serde_json::Value = serde_json::from_str(&j).unwrap();
    let (_, j, _) = get(&app, &format!("/runs/{train}/peak?device=0&format=json")).await;
    let page: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(page["live"]["by_annotation"], peak["by_annotation"]);
    assert!(
        peak["by_annotation"].as_array().unwrap().len() > 1,
        "annotations tell groups apart: {}",
        peak["by_annotation"]
    );
    assert_eq!(at["live"]["live_allocations"], peak["live_allocations"]);
    // Before the peak (replayed from the start) and at the end (from the peak snapshot
    // on), then again from dense checkpoints, the live bytes equal the sum of the stored
    // per-event deltas up to then.
    for pass in 0..2 {
        if pass == 1 {
            let n = store
                .extend_checkpoints_every(train, 0, 1000, 0)
                .await
                .unwrap();
            assert!(n >= 2, "{n} checkpoints");
        }
        for at in [t / 3, t - 1, t + 1, t * 2, t * 3 + 12345] {
            let (_, j, _) = get(
                &app,
                &format!("/api/runs/{train}/events?device=0&to={at}&limit=100000"),
            )
            .await;
            let ev: serde_json::Value = serde_json::from_str(&j).unwrap();
            assert!(ev["next_cursor"].is_null(), "one page");
            let sum: i64 = ev["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["delta"].as_i64().unwrap())
                .sum();
            let (_, j, _) = get(
                &app,
                &format!("/runs/{train}/peak?device=0&at={at}&format=json"),
            )
            .await;
            let v: serde_json::Value = serde_json::from_str(&j).unwrap();
            assert_eq!(
                v["live"]["peak_bytes"].as_i64().unwrap(),
                sum,
                "pass {pass} at {at}"
            );
        }
    }
    let (st, body, _) = get(&app, &format!("/runs/{train}/peak?device=0&at=0")).await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("What was live at"));

    // Compare aligned at a marker; a bad alignment is a clear 400.
    let (st, body, _) = get(
        &app,
        &format!("/compare?a={eval}&b={train}&align=marker:no-such-marker"),
    )
    .await;
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("aligned at their start instead"));
    let (st, body, _) = get(&app, &format!("/compare?a={eval}&b={train}&align=middle")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    assert!(body.contains("align=marker:NAME"));
}

#[tokio::test]
async fn an_end_without_a_known_status_is_stored_as_null_not_minus_one() {
    // The shim writes -1 when it could not learn the status; the API says null, like
    // `memwatch report --json`, and the process is ended, not running.
    let dir = tempfile::tempdir().unwrap();
    let (app, store) = app(&dir.path().join("x.db").display().to_string()).await;
    let mut ing = Ingestor::new(store.clone());
    let t0 = 7_000_000u64;
    let out = ing
        .commit(vec![Batch {
            node: "n".into(),
            stream: 1,
            seq: 0,
            run_key: "unknown-status".into(),
            records: vec![
                start(51, t0),
                Record::Events(vec![ev(t0 + 5, EventKind::Alloc, 0x1000, 4096, 0)]),
                Record::ProcessEnd(ProcessEnd {
                    pid: 51,
                    ts_ns: t0 + 10,
                    exit_code: -1,
                }),
            ],
        }])
        .await
        .unwrap();
    let id = out[0].run_id.unwrap();
    let (st, body, _) = get(&app, &format!("/api/runs/{id}")).await;
    assert_eq!(st, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let p = &v["processes"][0];
    assert!(p["exit_code"].is_null(), "{p}");
    // Its end is still recorded: it is not listed among running processes.
    let running = store.running_processes(600_000_000_000).await.unwrap();
    assert!(running.iter().all(|r| r.2 != 51), "{running:?}");
}
