//! API and storage tests through `tower::ServiceExt::oneshot`, on SQLite and (when
//! MEMWATCH_TEST_POSTGRES_URL is set) PostgreSQL.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::*;
use memwatch_daemon::openapi;
use memwatch_daemon::{Batch, Ingestor, Store};
use memwatch_wire::{EventKind, Marker, Record};
use tower::ServiceExt;

async fn app(url: &str, token: Option<&str>) -> (axum::Router, Store) {
    test_app(url, token, 1 << 20).await
}

async fn get(app: &axum::Router, uri: &str) -> (StatusCode, serde_json::Value) {
    let resp = app
        .clone()
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 30)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, v)
}

fn batch(seq: u64, records: Vec<Record>) -> Batch {
    Batch {
        node: "node-a".into(),
        stream: 99,
        seq,
        run_key: "job-1".into(),
        records,
    }
}

#[tokio::test]
async fn ingest_query_timeline_peak_events() {
    for url in dbs("ingest_query").await.urls {
        let (app, store) = app(&url, None).await;
        let t0 = 1_000_000u64;
        let events = workload(20_000, t0, 2, 7);
        let mut ing = Ingestor::new(store.clone());
        let mut records = vec![start(42, t0)];
        records.push(Record::Marker(Marker {
            pid: 42,
            tid: 7,
            ts_ns: t0 + 1,
            device: 0,
            text: "step 1".into(),
        }));
        for c in events.chunks(3000) {
            records.push(Record::Events(c.to_vec()));
        }
        let mut fail = ev(
            events.last().unwrap().ts_ns + 5,
            EventKind::AllocFailed,
            0,
            1 << 40,
            0,
        );
        fail.result = 2;
        records.push(Record::Events(vec![fail]));
        let out = ing.commit(vec![batch(1, records.clone())]).await.unwrap();
        assert_eq!(out[0].events, 20_001);
        // Resending the same batch is acknowledged and not stored twice.
        let again = ing.commit(vec![batch(1, records)]).await.unwrap();
        assert!(again[0].duplicate);

        let (st, runs) = get(&app, "/api/runs").await;
        assert_eq!(st, StatusCode::OK, "{url}");
        let run = &runs["runs"][0];
        assert_eq!(run["event_count"], 20_001);
        let id = run["id"].as_i64().unwrap();

        for dev in 0..2 {
            let curve = exact_curve(&events, dev);
            let peak = curve.iter().map(|c| c.1).max().unwrap();
            let final_live = curve.last().unwrap().1;
            // Whole-run timeline at several zooms: max over points equals the true peak,
            // every point's max is a real value, and the last point ends at the final live.
            for points in [1usize, 10, 2000, 100_000] {
                let (st, tl) = get(
                    &app,
                    &format!("/api/runs/{id}/timeline?device={dev}&points={points}"),
                )
                .await;
                assert_eq!(st, StatusCode::OK);
                let pts = tl["points"].as_array().unwrap();
                let maxes: Vec<i64> = pts.iter().map(|p| p["max"].as_i64().unwrap()).collect();
                assert_eq!(*maxes.iter().max().unwrap(), peak, "{url} points={points}");
                assert_eq!(
                    pts.last().unwrap()["last"].as_i64().unwrap(),
                    final_live,
                    "{url} dev={dev} points={points} {}",
                    tl["source"]
                );
            }
            // A fine zoom (raw path) agrees with the exact curve bucket by bucket.
            let (a, b) = (curve[100].0 - t0, curve[140].0 - t0);
            let (_, tl) = get(
                &app,
                &format!("/api/runs/{id}/timeline?device={dev}&from={a}&to={b}&points=2000"),
            )
            .await;
            assert_eq!(tl["source"], "raw");
            let bucket = tl["bucket_ns"].as_u64().unwrap();
            for p in tl["points"].as_array().unwrap() {
                let s = p["t_ns"].as_u64().unwrap() + t0;
                let e = (s + bucket).min(t0 + b);
                let inside: Vec<i64> = curve
                    .iter()
                    .filter(|c| c.0 >= s && c.0 < e)
                    .map(|c| c.1)
                    .collect();
                if let Some(m) = inside.iter().max() {
                    assert!(p["max"].as_i64().unwrap() >= *m);
                }
                assert_eq!(
                    p["last"].as_i64().unwrap(),
                    curve.iter().rfind(|c| c.0 < e).map_or(0, |c| c.1)
                );
            }
            let (_, pk) = get(&app, &format!("/api/runs/{id}/peak?device={dev}")).await;
            assert_eq!(pk["peak_bytes"].as_i64().unwrap(), peak, "{url}");
            let sum: u64 = pk["by_kind"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["bytes"].as_u64().unwrap())
                .sum();
            assert_eq!(
                sum as i64, peak,
                "live allocations at the peak add up to it"
            );
            assert_eq!(pk["by_annotation"][0]["key"], "step 1");
        }

        // Paging through events of device 0 returns exactly its events, in order.
        let mut cursor = String::new();
        let mut got = Vec::new();
        loop {
            let (_, page) = get(
                &app,
                &format!("/api/runs/{id}/events?device=0&limit=777&cursor={cursor}"),
            )
            .await;
            for e in page["events"].as_array().unwrap() {
                got.push((e["ts_ns"].as_u64().unwrap(), e["ptr"].as_u64().unwrap()));
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
        let want: Vec<(u64, u64)> = events
            .iter()
            .chain(std::iter::once(&fail))
            .filter(|e| e.device == 0)
            .map(|e| (e.ts_ns, e.ptr))
            .collect();
        assert_eq!(got, want);

        let (_, inc) = get(&app, "/api/incidents").await;
        assert_eq!(inc["incidents"][0]["size"], 1u64 << 40);
        assert_eq!(inc["incidents"][0]["result"], 2);
        let (_, nodes) = get(&app, "/api/nodes").await;
        assert_eq!(nodes["nodes"][0]["name"], "node-a");
        let (st, _) = get(&app, "/api/runs/999999").await;
        assert_eq!(st, StatusCode::NOT_FOUND);
        let (st, _) = get(&app, &format!("/api/runs/{id}/timeline?from=10&to=5")).await;
        assert_eq!(st, StatusCode::BAD_REQUEST);
        // Offsets up to u64::MAX answer (empty) instead of overflowing in the handler.
        let max = u64::MAX;
        for q in [
            format!("/api/runs/{id}/events?device=0&from={max}"),
            format!("/api/runs/{id}/events?device=0&to={max}"),
            format!("/api/runs/{id}/timeline?device=0&from={}", max - 1),
            format!("/api/runs/{id}/timeline?device=0&to={max}"),
            format!("/api/runs/{id}/annotations?from={max}&to={max}"),
        ] {
            let (st, v) = get(&app, &q).await;
            assert!(
                st == StatusCode::OK || st == StatusCode::BAD_REQUEST,
                "{q}: {st} {v}"
            );
        }
    }
}

#[tokio::test]
async fn restart_rebuilds_state_and_continues() {
    for url in dbs("restart").await.urls {
        let t0 = 5_000u64;
        let events = workload(6000, t0, 1, 3);
        {
            let store = Store::open(&url).await.unwrap();
            let mut ing = Ingestor::new(store);
            ing.commit(vec![batch(
                1,
                vec![start(42, t0), Record::Events(events[..3000].to_vec())],
            )])
            .await
            .unwrap();
        }
        // A new ingestor (daemon restart) continues the same run from the stored chunks.
        let (app, store) = app(&url, None).await;
        let mut ing = Ingestor::new(store.clone());
        let out = ing
            .commit(vec![
                batch(1, vec![Record::Events(events[..3000].to_vec())]),
                batch(2, vec![Record::Events(events[3000..].to_vec())]),
            ])
            .await
            .unwrap();
        assert!(out[0].duplicate);
        assert_eq!(out[1].events, 3000);
        let curve = exact_curve(&events, 0);
        let (_, runs) = get(&app, "/api/runs").await;
        assert_eq!(runs["runs"][0]["event_count"], 6000);
        assert_eq!(
            runs["runs"][0]["devices"][0]["live_bytes"],
            curve.last().unwrap().1
        );
        assert_eq!(
            runs["runs"][0]["devices"][0]["peak_bytes"],
            curve.iter().map(|c| c.1).max().unwrap()
        );
    }
}

#[tokio::test]
async fn bad_http_input_and_auth() {
    let d = dbs("bad_http").await;
    let (app, _) = app(&d.urls[0], Some("s3cret")).await;
    let send = |uri: &str, body: Vec<u8>, auth: bool| {
        let mut r = Request::post(uri);
        if auth {
            r = r.header("authorization", "Bearer s3cret");
        }
        app.clone().oneshot(r.body(Body::from(body)).unwrap())
    };
    let r = send("/api/ingest?node=n", vec![], false).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let (st, _) = get(&app, "/api/runs").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
    // Garbage.
    let r = send(
        "/api/ingest?node=n",
        b"hello world, not a capture".to_vec(),
        true,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Wrong version.
    let mut pre = memwatch_wire::frame::encode_preamble().to_vec();
    pre[8] = 9;
    let r = send("/api/ingest?node=n", pre, true).await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("version 9"));
    // Truncated frame.
    let mut good = memwatch_wire::frame::encode_preamble().to_vec();
    memwatch_wire::encode_record(
        &Record::Events(vec![ev(1, EventKind::Alloc, 1, 1, 0)]),
        &mut good,
    )
    .unwrap();
    let r = send("/api/ingest?node=n", good[..good.len() - 3].to_vec(), true)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // Oversized body (limit 1 MiB in this router).
    let r = send("/api/ingest?node=n", vec![0u8; 2 << 20], true)
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Nothing was stored; a good upload still works.
    let r = send("/api/ingest?node=n&run=r", good, true).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let resp = app
        .clone()
        .oneshot(
            Request::get("/api/runs")
                .header("authorization", "Bearer s3cret")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(
        &axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 1);
    assert_eq!(v["runs"][0]["event_count"], 1);
}

/// Query strings, paths and bodies that axum's extractors refuse answer like every other
/// API error: `{"error": "..."}` naming what is wrong, with the right status.
#[tokio::test]
async fn extractor_rejections_are_json_errors() {
    let d = dbs("json_errors").await;
    let (app, _) = app(&d.urls[0], None).await;
    for (uri, names) in [
        ("/api/runs?limit=abc", "limit"),
        ("/api/runs?limit=99999999999999999999999", "limit"),
        ("/api/runs/notanumber", "notanumber"),
        ("/api/runs/1/timeline?from=-5", "from"),
        ("/api/runs/1/events?limit=-1", "limit"),
        ("/api/runs/1/peak?top=x", "top"),
        ("/api/runs/1/runtime?points=1.5", "points"),
        ("/api/incidents?run=x", "run"),
    ] {
        let (st, v) = get(&app, uri).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{uri}: {v}");
        let msg = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{uri}: not a JSON error: {v}"));
        assert!(msg.contains(names), "{uri}: {msg}");
    }
    let post = |uri: &str, body: Vec<u8>| {
        app.clone().oneshot(
            Request::post(uri)
                .header("content-type", "application/octet-stream")
                .body(Body::from(body))
                .unwrap(),
        )
    };
    for (uri, body, status, says) in [
        (
            "/api/ingest",
            vec![1u8; 20],
            StatusCode::BAD_REQUEST,
            "node",
        ),
        (
            "/api/ingest?node=n",
            vec![0u8; 2 << 20],
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
        ),
        (
            "/api/runs/1/xla",
            vec![b'{'; 2 << 20],
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit",
        ),
    ] {
        let r = post(uri, body).await.unwrap();
        assert_eq!(r.status(), status, "{uri}");
        let v: serde_json::Value =
            serde_json::from_slice(&axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap())
                .unwrap_or_else(|e| panic!("{uri}: not JSON: {e}"));
        let msg = v["error"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{uri}: {v}");
    }
}

#[tokio::test]
async fn openapi_documents_every_route_and_metrics_render() {
    let d = dbs("openapi").await;
    let (app, _) = app(&d.urls[0], None).await;
    let (st, doc) = get(&app, "/api/openapi.json").await;
    assert_eq!(st, StatusCode::OK);
    let paths = doc["paths"].as_object().unwrap();
    let distinct: std::collections::BTreeSet<&str> =
        openapi::ROUTES.iter().map(|(_, p)| *p).collect();
    assert_eq!(paths.len(), distinct.len());
    for (method, path) in openapi::ROUTES {
        assert!(
            paths[*path].get(*method).is_some(),
            "{method} {path} undocumented"
        );
        let uri = path.replace("{id}", "1");
        let req = Request::builder()
            .method(method.to_uppercase().as_str())
            .uri(&uri)
            .body(Body::empty())
            .unwrap();
        let resp = app.clone().oneshot(req).await.unwrap();
        // Every documented route exists: anything but 404-from-the-router / 405.
        assert_ne!(resp.status(), StatusCode::METHOD_NOT_ALLOWED, "{uri}");
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        assert!(!body.is_empty(), "{uri} answered with an empty body");
    }
    let resp = app
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = String::from_utf8(
        axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(text.contains("# TYPE memwatch_ingest_events_total counter"));
    assert!(text.contains("memwatch_ingest_queue_depth 0"));
}

/// Retention (`memwatch serve --retain-raw-days`): raw event chunks older than the limit
/// are deleted; the downsampled rollups and the peak snapshot stay, so the whole-run
/// timeline and the peak still answer exactly.
#[tokio::test]
async fn retention_drops_raw_events_keeps_rollups_and_peak() {
    for url in dbs("retention").await.urls {
        let (app, store) = app(&url, None).await;
        let t0 = 5_000_000u64;
        let events = workload(6_000, t0, 1, 11);
        // Six commits, so six stored chunks.
        let mut ing = Ingestor::new(store.clone());
        for (i, c) in events.chunks(1000).enumerate() {
            let mut records = if i == 0 { vec![start(42, t0)] } else { vec![] };
            records.push(Record::Events(c.to_vec()));
            ing.commit(vec![batch(i as u64 + 1, records)])
                .await
                .unwrap();
        }
        let (_, runs) = get(&app, "/api/runs").await;
        let id = runs["runs"][0]["id"].as_i64().unwrap();
        let curve = exact_curve(&events, 0);
        let peak = curve.iter().map(|c| c.1).max().unwrap();
        let (_, before) = get(&app, &format!("/api/runs/{id}/peak?device=0")).await;
        assert_eq!(before["peak_bytes"].as_i64().unwrap(), peak, "{url}");

        // Nothing is older than a day.
        assert_eq!(store.apply_retention(86_400_000_000_000).await.unwrap(), 0);
        let (_, page) = get(&app, &format!("/api/runs/{id}/events?device=0&limit=10")).await;
        assert_eq!(page["events"].as_array().unwrap().len(), 10, "{url}");

        // Old enough, but no checkpoint covers the chunks yet: nothing may go (the live
        // sets after them could never be rebuilt).
        assert_eq!(store.apply_retention(0).await.unwrap(), 0, "{url}");
        // A checkpoint after each chunk (as the daemon's checkpointer writes them, denser).
        let written = store
            .extend_checkpoints_every(id, 0, 1000, 0)
            .await
            .unwrap();
        assert_eq!(written, 6, "{url}");
        let deleted = store.apply_retention(0).await.unwrap();
        assert_eq!(deleted, 6, "{url}: every chunk is old and covered");
        let (_, page) = get(&app, &format!("/api/runs/{id}/events?device=0&limit=10")).await;
        assert!(
            page["events"].as_array().unwrap().is_empty(),
            "{url}: {page}"
        );
        let (st, tl) = get(&app, &format!("/api/runs/{id}/timeline?device=0&points=50")).await;
        assert_eq!(st, StatusCode::OK, "{url}");
        let max = tl["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["max"].as_i64().unwrap())
            .max()
            .unwrap();
        assert_eq!(max, peak, "{url}: the rollups must keep the peak");
        // A zoom fine enough for raw events is answered from the finest rollup level.
        let (a, b) = (curve[100].0 - t0, curve[140].0 - t0);
        let (st, fine) = get(
            &app,
            &format!("/api/runs/{id}/timeline?device=0&from={a}&to={b}&points=200"),
        )
        .await;
        assert_eq!(st, StatusCode::OK, "{url}");
        assert_eq!(fine["source"], "rollup", "{url}: {fine}");
        let in_range = curve[100..140].iter().map(|c| c.1).max().unwrap();
        let fine_max = fine["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["max"].as_i64().unwrap())
            .max()
            .unwrap();
        assert!(
            fine_max >= in_range && fine_max <= peak,
            "{url}: {fine_max} vs {in_range}..{peak}"
        );
        let (_, after) = get(&app, &format!("/api/runs/{id}/peak?device=0")).await;
        assert_eq!(after["peak_bytes"], before["peak_bytes"], "{url}");
        assert_eq!(
            after["live_allocations"], before["live_allocations"],
            "{url}"
        );
        // What was live at an instant inside pruned time: the nearest exact state before
        // it (the checkpoint after the 2nd chunk), named by its own instant; after the
        // last checkpoint, the instant asked for.
        let live_at = |at: u64| {
            let app = app.clone();
            async move {
                let (st, v) = get(
                    &app,
                    &format!("/runs/{id}/peak?device=0&at={at}&format=json"),
                )
                .await;
                assert_eq!(st, StatusCode::OK);
                (
                    v["live"]["peak_ts_ns"].as_u64().unwrap(),
                    v["live"]["peak_bytes"].as_i64().unwrap(),
                )
            }
        };
        let asked = curve[2500].0 - t0;
        let (ts, bytes) = live_at(asked).await;
        assert_eq!(
            ts,
            curve[1999].0 - t0,
            "{url}: the checkpoint after event 2000"
        );
        assert_eq!(bytes, curve[1999].1, "{url}");
        let end = curve[5999].0 - t0;
        assert_eq!(live_at(end).await, (end, curve[5999].1), "{url}");
        let (_, html) = {
            let resp = app
                .clone()
                .oneshot(
                    Request::get(format!("/runs/{id}/peak?device=0&at={asked}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await
                .unwrap();
            let b = axum::body::to_bytes(resp.into_body(), 1 << 24)
                .await
                .unwrap();
            ((), String::from_utf8_lossy(&b).into_owned())
        };
        assert!(
            html.contains("deleted by retention"),
            "{url}: the page says so"
        );
        let (ts, bytes) = live_at(curve[500].0 - t0).await;
        assert_eq!(
            (ts, bytes),
            (0, 0),
            "{url}: before the first checkpoint: the start"
        );
    }
}

#[tokio::test]
async fn run_detail_inlines_some_annotations_and_pages_the_rest() {
    for url in dbs("annotations").await.urls {
        let (app, store) = app(&url, None).await;
        let t0 = 1_000_000u64;
        let mut records = vec![start(42, t0)];
        // 2,500 markers, two at each of 1,250 instants (ties are ordered by id).
        for i in 0..2500u64 {
            records.push(Record::Marker(Marker {
                pid: 42,
                tid: 7,
                ts_ns: t0 + 10 + (i / 2) * 1000,
                device: 0,
                text: format!("step {i}"),
            }));
        }
        records.push(Record::Events(workload(100, t0, 1, 3)));
        let out = Ingestor::new(store.clone())
            .commit(vec![batch(1, records)])
            .await
            .unwrap();
        let run = out[0].run_id.unwrap();
        let (st, d) = get(&app, &format!("/api/runs/{run}")).await;
        assert_eq!(st, StatusCode::OK);
        assert_eq!(d["annotation_count"], 2500);
        assert_eq!(d["annotations"].as_array().unwrap().len(), 1000);
        assert_eq!(d["annotations"][999]["text"], "step 999");
        let mut cursor = d["annotations_next_cursor"].as_str().unwrap().to_string();
        let mut texts: Vec<String> = d["annotations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["text"].as_str().unwrap().to_string())
            .collect();
        loop {
            let (st, p) = get(
                &app,
                &format!("/api/runs/{run}/annotations?limit=700&cursor={cursor}"),
            )
            .await;
            assert_eq!(st, StatusCode::OK, "{p}");
            texts.extend(
                p["annotations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a["text"].as_str().unwrap().to_string()),
            );
            match p["next_cursor"].as_str() {
                Some(c) => cursor = c.to_string(),
                None => break,
            }
        }
        let want: Vec<String> = (0..2500).map(|i| format!("step {i}")).collect();
        assert_eq!(texts, want, "every annotation once, in order");
        // A time window (ns since the run's start): instants 10+1000k for k in 5..8.
        let (_, p) = get(
            &app,
            &format!("/api/runs/{run}/annotations?from=5000&to=8000"),
        )
        .await;
        let got: Vec<&str> = p["annotations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            got,
            ["step 10", "step 11", "step 12", "step 13", "step 14", "step 15"]
        );
        assert!(p["next_cursor"].is_null());
        let (st, e) = get(&app, &format!("/api/runs/{run}/annotations?cursor=nope")).await;
        assert_eq!(st, StatusCode::BAD_REQUEST);
        assert!(e.to_string().contains("TS:ID"), "{e}");
        // The events endpoint's cursor has its own form (and a negative index is bad).
        for c in ["nope", "1:-2", "1"] {
            let (st, e) = get(&app, &format!("/api/runs/{run}/events?cursor={c}")).await;
            assert_eq!(st, StatusCode::BAD_REQUEST, "{c}");
            assert!(e.to_string().contains("CHUNK:INDEX"), "{e}");
        }
        let (st, _) = get(&app, "/api/runs/999999/annotations").await;
        assert_eq!(st, StatusCode::NOT_FOUND);
    }
}

/// With a token, a browser can use the dashboard: a page load without it goes to
/// /login; the form with the right token sets an HttpOnly cookie and goes back to the
/// page; the cookie opens pages and API calls (the pages' own fetches); a wrong token
/// stays on the form; API clients still get a JSON 401; a `next` that leaves the server
/// is not followed.
#[tokio::test]
async fn browsers_sign_in_with_a_cookie() {
    let d = dbs("browser_login").await;
    let (app, _) = app(&d.urls[0], Some("s3 cr;et")).await;
    let call = |r: Request<Body>| app.clone().oneshot(r);
    let page = Request::get("/runs?x=1")
        .header("accept", "text/html,application/xhtml+xml")
        .body(Body::empty())
        .unwrap();
    let r = call(page).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/login?next=/runs%3Fx%3D1");
    let r = call(Request::get("/api/runs").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    let form = |token: &str, next: &str| {
        Request::post("/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!(
                "token={}&next={}",
                token.replace(' ', "+").replace(';', "%3B"),
                next.replace('/', "%2F")
                    .replace('?', "%3F")
                    .replace('=', "%3D")
            )))
            .unwrap()
    };
    let r = call(form("wrong", "/runs")).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    assert!(String::from_utf8_lossy(&body).contains("Wrong token"));
    let r = call(form("s3 cr;et", "//evil.example/x")).await.unwrap();
    assert_eq!(r.headers()["location"], "/");
    let r = call(form("s3 cr;et", "/runs?x=1")).await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/runs?x=1");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    for uri in ["/", "/api/runs"] {
        let r = call(
            Request::get(uri)
                .header("accept", "text/html")
                .header("cookie", &pair)
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{uri}");
    }
    let r = call(
        Request::get("/api/runs")
            .header("cookie", "memwatch_token=00")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

/// `/runs/{id}?format=json` answers the run's data (the `/api/runs/{id}` document), as
/// the pages' `format` rule says; before, it answered the HTML page.
#[tokio::test]
async fn the_run_page_answers_json_when_asked() {
    let d = dbs("run_page_json").await;
    let (app, store) = app(&d.urls[0], None).await;
    let mut ing = Ingestor::new(store.clone());
    ing.commit(vec![batch(
        1,
        vec![
            start(42, 1_000),
            Record::Events(vec![ev(2_000, EventKind::Alloc, 0x10, 4096, 0)]),
        ],
    )])
    .await
    .unwrap();
    let id = store.runs(1).await.unwrap()[0].id;
    let (st, page) = get(&app, &format!("/runs/{id}?format=json")).await;
    assert_eq!(st, StatusCode::OK);
    let (_, api) = get(&app, &format!("/api/runs/{id}")).await;
    assert_eq!(page, api);
    assert_eq!(page["id"], id);
    let (st, _) = get(&app, &format!("/runs/{id}?format=xml")).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let (st, _) = get(&app, "/runs/999?format=json").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}
